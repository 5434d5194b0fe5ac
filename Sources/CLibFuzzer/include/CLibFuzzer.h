#ifndef PARLEY_CLIBFUZZER_H
#define PARLEY_CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver, for a program that has its own main (libclang_rt.fuzzer, linked by
/// -sanitize=fuzzer, defines it). Declared only: nothing calls it unless built for fuzzing.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
