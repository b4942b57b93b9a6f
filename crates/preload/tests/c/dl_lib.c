/* A library the shim test loads with dlopen: its allocations go through the same routing. */
#include <stdlib.h>
void *lib_alloc(size_t n) { return malloc(n); }
void lib_free(void *p) { free(p); }
