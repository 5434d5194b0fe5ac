// Commits and checkpoints racing on one SQLite WAL database, in separate processes, to see whether
// the installed SQLite loses commits (the "WAL-reset bug", fixed in SQLite 3.51.3).
//
// Writers: each transaction reads a counter and writes the next value both back and into a log
// row, as a conversation's commit reads its last seq and appends the next. A commit lost by the
// database shows as fewer log rows than the counter says, or as one value written twice.
// Checkpointers: PASSIVE checkpoints, two back to back, then a short random pause. Guarded, each
// checkpointer holds the write lock on a second connection of its own (an empty IMMEDIATE
// transaction) while it checkpoints, as Parley's nodes do.
//
//   stress PATH WRITERS CHECKPOINTERS SECONDS GUARDED(0|1)
// prints "counter N rows M values-twice K"; exits 1 when commits were lost.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *path;
static int seconds, guarded;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static sqlite3 *open_database(void) {
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    sqlite3_busy_timeout(db, 10000);
    sqlite3_exec(db, "PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;", 0, 0, 0);
    return db;
}

static void writer(int id) {
    sqlite3 *db = open_database();
    sqlite3_stmt *get, *log, *put;
    sqlite3_prepare_v2(db, "SELECT n FROM counter", -1, &get, 0);
    sqlite3_prepare_v2(db, "INSERT INTO log (value, writer) VALUES (?, ?)", -1, &log, 0);
    sqlite3_prepare_v2(db, "UPDATE counter SET n = ?", -1, &put, 0);
    double end = now() + seconds;
    while (now() < end) {
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0) != SQLITE_OK) continue;
        sqlite3_step(get);
        sqlite3_int64 n = sqlite3_column_int64(get, 0);
        sqlite3_reset(get);
        sqlite3_bind_int64(log, 1, n + 1);
        sqlite3_bind_int(log, 2, id);
        sqlite3_step(log);
        sqlite3_reset(log);
        sqlite3_bind_int64(put, 1, n + 1);
        sqlite3_step(put);
        sqlite3_reset(put);
        if (sqlite3_exec(db, "COMMIT", 0, 0, 0) != SQLITE_OK) sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
        if (rand() % 4 == 0) usleep(rand() % 3000);
    }
    sqlite3_finalize(get);
    sqlite3_finalize(log);
    sqlite3_finalize(put);
    sqlite3_close(db);
}

static void checkpointer(void) {
    sqlite3 *db = open_database();
    sqlite3 *lock = guarded ? open_database() : NULL;
    double end = now() + seconds;
    while (now() < end) {
        if (lock && sqlite3_exec(lock, "BEGIN IMMEDIATE", 0, 0, 0) != SQLITE_OK) continue;
        for (int i = 0; i < 2; i++) {
            int frames, copied;
            sqlite3_wal_checkpoint_v2(db, 0, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied);
        }
        if (lock) sqlite3_exec(lock, "COMMIT", 0, 0, 0);
        usleep(rand() % 2000);
    }
    sqlite3_close(db);
    if (lock) sqlite3_close(lock);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s PATH WRITERS CHECKPOINTERS SECONDS GUARDED(0|1)\n", argv[0]);
        return 2;
    }
    path = argv[1];
    int writers = atoi(argv[2]), checkpointers = atoi(argv[3]);
    seconds = atoi(argv[4]);
    guarded = atoi(argv[5]);
    char name[4096];
    unlink(path);
    snprintf(name, sizeof name, "%s-wal", path);
    unlink(name);
    snprintf(name, sizeof name, "%s-shm", path);
    unlink(name);
    sqlite3 *db = open_database();
    sqlite3_exec(db, "PRAGMA journal_mode = WAL; CREATE TABLE counter (n INTEGER); INSERT INTO counter VALUES (0);"
                     "CREATE TABLE log (id INTEGER PRIMARY KEY, value INTEGER, writer INTEGER);", 0, 0, 0);
    for (int i = 0; i < writers + checkpointers; i++) {
        if (fork() == 0) {
            srand(getpid());
            if (i < writers) writer(i); else checkpointer();
            _exit(0);
        }
    }
    while (wait(NULL) > 0) {}
    sqlite3_stmt *s;
    sqlite3_prepare_v2(db, "SELECT (SELECT n FROM counter), (SELECT count(*) FROM log),"
                           " (SELECT count(*) FROM (SELECT value FROM log GROUP BY value HAVING count(*) > 1))", -1, &s, 0);
    sqlite3_step(s);
    sqlite3_int64 counter = sqlite3_column_int64(s, 0), rows = sqlite3_column_int64(s, 1), twice = sqlite3_column_int64(s, 2);
    printf("counter %lld rows %lld values-twice %lld\n", counter, rows, twice);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return counter == rows && twice == 0 ? 0 : 1;
}
