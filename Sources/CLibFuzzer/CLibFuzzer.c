// The declarations are in include/CLibFuzzer.h; a C target needs a source file.
#include "CLibFuzzer.h"
