#ifndef PARLEY_CSQLITESETTINGS_H
#define PARLEY_CSQLITESETTINGS_H

/// Turns off SQLite's memory statistics (SQLITE_CONFIG_MEMSTATUS): with them on, every SQLite
/// allocation and free takes a process-wide mutex to keep counts nothing here reads. Process-wide
/// and not thread-safe: call it once at start, before any database is opened on any thread.
/// Returns SQLite's result code (SQLITE_MISUSE when SQLite is already initialized).
int parley_sqlite_turn_off_memory_statistics(void);

#endif
