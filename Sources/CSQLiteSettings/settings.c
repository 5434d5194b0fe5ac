#include <sqlite3.h>
#include "CSQLiteSettings.h"

// sqlite3_config takes C variadic arguments, which Swift cannot pass: each setting is a fixed
// function here.
int parley_sqlite_turn_off_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
