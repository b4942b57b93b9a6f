/* The interposition floor: a preloaded library that defines every function the vmarena shim
 * defines (the malloc family and every C++ operator new/delete form) and does nothing in them
 * but jump to the next definition.
 *
 * It is the least any LD_PRELOAD allocator shim can cost: the program's call now lands here
 * first, and one more indirect jump takes it where it would have gone. `vmarena suite` runs
 * it as `interposer` (glibc next) and `interposer+PEER`, so that the shim's cost splits into
 * what interposing costs and what the shim adds to it.
 *
 * Each function is resolved with dlsym(RTLD_NEXT) by a constructor, or by the first call that
 * comes before it (another library's constructor may run first). dlsym may itself allocate:
 * `malloc` and `calloc` calls made while the slots are being resolved are served from a static
 * buffer, never reused and never freed. A C program has no next C++ operators (libstdc++
 * defines them): their slots keep their stubs, which stop the program with a message if one is
 * ever called.
 *
 * Every forwarder has the same shape: up to three integer arguments, passed on untouched, so
 * that the compiler emits a bare `jmp *next(%rip)`. On x86-64 and aarch64 a function that takes
 * fewer integer arguments ignores the extra registers, so the shape fits every form. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef uintptr_t (*fwd_fn)(uintptr_t, uintptr_t, uintptr_t);

/* Before the next definitions are known: a bump heap of static, zeroed memory. */
static _Alignas(64) unsigned char early_heap[1 << 16];
static size_t early_used;

static void *early_alloc(size_t align, size_t size)
{
    size_t at = (early_used + align - 1) & ~(align - 1);
    if (size > sizeof early_heap || at > sizeof early_heap - size)
        return NULL;
    early_used = at + size;
    return early_heap + at;
}

static int early(uintptr_t p)
{
    return p - (uintptr_t)early_heap < sizeof early_heap;
}

/* `free` and `realloc` have bodies of their own (below); every other function is a bare
 * forwarder. */
#define SPECIAL_FORWARDERS(X)                                                                  \
    X(free)                                                                                    \
    X(realloc)
#define PLAIN_FORWARDERS(X)                                                                    \
    X(malloc)                                                                                  \
    X(calloc)                                                                                  \
    X(posix_memalign)                                                                          \
    X(aligned_alloc)                                                                           \
    X(memalign)                                                                                \
    X(valloc)                                                                                  \
    X(pvalloc)                                                                                 \
    X(malloc_usable_size)                                                                      \
    X(_Znwm)                                                                                   \
    X(_Znam)                                                                                   \
    X(_ZnwmRKSt9nothrow_t)                                                                     \
    X(_ZnamRKSt9nothrow_t)                                                                     \
    X(_ZnwmSt11align_val_t)                                                                    \
    X(_ZnamSt11align_val_t)                                                                    \
    X(_ZnwmSt11align_val_tRKSt9nothrow_t)                                                      \
    X(_ZnamSt11align_val_tRKSt9nothrow_t)                                                      \
    X(_ZdlPv)                                                                                  \
    X(_ZdaPv)                                                                                  \
    X(_ZdlPvRKSt9nothrow_t)                                                                    \
    X(_ZdaPvRKSt9nothrow_t)                                                                    \
    X(_ZdlPvm)                                                                                 \
    X(_ZdaPvm)                                                                                 \
    X(_ZdlPvSt11align_val_t)                                                                   \
    X(_ZdaPvSt11align_val_t)                                                                   \
    X(_ZdlPvmSt11align_val_t)                                                                  \
    X(_ZdaPvmSt11align_val_t)                                                                  \
    X(_ZdlPvSt11align_val_tRKSt9nothrow_t)                                                     \
    X(_ZdaPvSt11align_val_tRKSt9nothrow_t)
#define FORWARDERS(X) SPECIAL_FORWARDERS(X) PLAIN_FORWARDERS(X)

static void interposer_init(void);
static int resolving;

/* Each slot starts at a stub that resolves every slot and then calls what it found, so that a
 * call made before this library's constructor runs (another library's constructor may come
 * first) gets there too; afterwards the forwarder is a bare indirect jump. */
#define SLOT(name)                                                                             \
    static uintptr_t first_##name(uintptr_t, uintptr_t, uintptr_t);                          \
    static fwd_fn next_##name = first_##name;                                                  \
    static uintptr_t first_##name(uintptr_t a, uintptr_t b, uintptr_t c)                      \
    {                                                                                          \
        interposer_init();                                                                     \
        if (next_##name == first_##name)                                                       \
            return early_call(#name, a, b, c);                                                 \
        return next_##name(a, b, c);                                                           \
    }

/* A call while the slots are being resolved (dlsym allocates) or whose next definition does
 * not exist: `malloc` and `calloc` from the static buffer, anything else is fatal. */
static uintptr_t early_call(const char *name, uintptr_t a, uintptr_t b, uintptr_t c)
{
    (void)c;
    if (!strcmp(name, "malloc"))
        return (uintptr_t)early_alloc(16, a);
    if (!strcmp(name, "calloc"))
        return b && a > SIZE_MAX / b ? 0 : (uintptr_t)early_alloc(16, a * b); /* zeroed */
    if (!strcmp(name, "realloc") && a == 0)
        return (uintptr_t)early_alloc(16, b);
    static const char msg[] = "interposer: a call with no next definition\n";
    (void)!write(2, msg, sizeof msg - 1);
    __builtin_abort();
}

FORWARDERS(SLOT)

/* `free` and `realloc` also take blocks of the static buffer, which is never reused. */
void free(void *p)
{
    if (!early((uintptr_t)p))
        next_free((uintptr_t)p, 0, 0);
}

void *realloc(void *p, size_t n)
{
    if (early((uintptr_t)p)) {
        void *q = (void *)next_malloc(n, 0, 0);
        if (q) {
            size_t room = (size_t)(early_heap + sizeof early_heap - (unsigned char *)p);
            memcpy(q, p, n < room ? n : room);
        }
        return q;
    }
    return (void *)next_realloc((uintptr_t)p, n, 0);
}

/* The forwarders' shape differs from the C library's declarations of the same names. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wbuiltin-declaration-mismatch"
#endif
#define PLAIN(name)                                                                            \
    uintptr_t name(uintptr_t a, uintptr_t b, uintptr_t c)                                      \
    {                                                                                          \
        return next_##name(a, b, c);                                                           \
    }
PLAIN_FORWARDERS(PLAIN)

static fwd_fn resolve(const char *name)
{
    return (fwd_fn)dlsym(RTLD_NEXT, name);
}

/* Runs before the program's constructors, unless a stub ran it earlier. Each slot is set as
 * soon as it is found, `free` first: a failed lookup (a C++ operator in a C program) frees its
 * error message. */
__attribute__((constructor(101))) static void interposer_init(void)
{
    if (resolving)
        return;
    resolving = 1;
    fwd_fn f;
#define LOOKUP(name)                                                                           \
    if ((f = resolve(#name)))                                                                  \
        next_##name = f;
    LOOKUP(free)
    FORWARDERS(LOOKUP)
}
