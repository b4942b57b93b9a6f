// The shim's C++ operators (crates/preload/tests/cpp_operators.rs): every operator new form,
// large and small, each released by every delete form that may release it, with a content
// pattern checked before each delete. Run under LD_PRELOAD=libvmarena_preload.so, alone or with
// jemalloc, mimalloc or tcmalloc preloaded after it.
//
// Usage: cpp_operators PEER (glibc, jemalloc, mimalloc or tcmalloc: who must own the small
// blocks). Prints "large news N" (what the shim's statistics must count as served by vmarena)
// and "ok cpp_operators", and exits 0, when every check passed.
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

static int failures;
#define CHECK(c) do { if (!(c)) { std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static const size_t kLarge = 1 << 20;  // above the test's threshold (64 KiB)
static const size_t kSmall = 96;
static size_t large_news;

typedef size_t (*size_fn)(const void *);
static size_fn vm_size;  // vmarena_size, exported by the shim: > 0 only for live vmarena areas

// Whether the next allocator (PEER) owns p, by the peer's own query; -1 when it has none.
static std::string peer;
static int peer_owns(void *p) {
    if (peer == "mimalloc") {
        auto f = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "mi_is_in_heap_region");
        return f ? f(p) : -1;
    }
    if (peer == "tcmalloc") {
        auto f = (int (*)(const void *))dlsym(RTLD_DEFAULT, "MallocExtension_GetOwnership");
        return f ? f(p) == 1 : -1;  // 1: owned, 2: not owned
    }
    return -1;
}

// jemalloc counts the bytes each thread allocated through it.
static uint64_t jemalloc_thread_allocated() {
    auto f = (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
    uint64_t v = 0;
    size_t len = sizeof v;
    if (!f || f("thread.allocated", &v, &len, nullptr, 0) != 0) return 0;
    return v;
}

static void fill(void *p, size_t n, unsigned owner) {
    auto *b = static_cast<unsigned char *>(p);
    for (size_t i = 0; i < n; i += 61) b[i] = (unsigned char)(owner ^ (i * 31));
    b[n - 1] = (unsigned char)owner;
}
static bool verify(const void *p, size_t n, unsigned owner) {
    auto *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; i += 61)
        if (b[i] != (unsigned char)(owner ^ (i * 31))) return false;
    return b[n - 1] == (unsigned char)owner;
}

// A block from one new form: where it went, what it holds.
static void *got(void *p, size_t n, size_t align, unsigned owner) {
    CHECK(p != nullptr);
    if (!p) return nullptr;
    CHECK(((uintptr_t)p % (align ? align : 16)) == 0);
    bool large = n >= kLarge;
    CHECK((vm_size(p) > 0) == large);
    if (large) {
        large_news++;
        CHECK(vm_size(p) >= n);
    } else {
        int owns = peer_owns(p);
        CHECK(owns != 0);  // -1: the peer has no query (glibc, jemalloc: counted below)
    }
    fill(p, n, owner);
    return p;
}
static void release_check(void *p, size_t n, unsigned owner) { CHECK(verify(p, n, owner)); }

static void plain_and_array(size_t n, unsigned owner) {
    void *p;
    p = got(::operator new(n), n, 0, owner); release_check(p, n, owner); ::operator delete(p);
    p = got(::operator new(n), n, 0, owner); release_check(p, n, owner); ::operator delete(p, n);
    p = got(::operator new(n), n, 0, owner); release_check(p, n, owner); ::operator delete(p, std::nothrow);
    p = got(::operator new[](n), n, 0, owner); release_check(p, n, owner); ::operator delete[](p);
    p = got(::operator new[](n), n, 0, owner); release_check(p, n, owner); ::operator delete[](p, n);
    p = got(::operator new[](n), n, 0, owner); release_check(p, n, owner); ::operator delete[](p, std::nothrow);
    p = got(::operator new(n, std::nothrow), n, 0, owner); release_check(p, n, owner); ::operator delete(p, std::nothrow);
    p = got(::operator new(n, std::nothrow), n, 0, owner); release_check(p, n, owner); ::operator delete(p);
    p = got(::operator new[](n, std::nothrow), n, 0, owner); release_check(p, n, owner); ::operator delete[](p, std::nothrow);
    p = got(::operator new[](n, std::nothrow), n, 0, owner); release_check(p, n, owner); ::operator delete[](p);
}

static void aligned(size_t n, size_t a, unsigned owner) {
    std::align_val_t al{a};
    void *p;
    p = got(::operator new(n, al), n, a, owner); release_check(p, n, owner); ::operator delete(p, al);
    p = got(::operator new(n, al), n, a, owner); release_check(p, n, owner); ::operator delete(p, n, al);
    p = got(::operator new(n, al), n, a, owner); release_check(p, n, owner); ::operator delete(p, al, std::nothrow);
    p = got(::operator new[](n, al), n, a, owner); release_check(p, n, owner); ::operator delete[](p, al);
    p = got(::operator new[](n, al), n, a, owner); release_check(p, n, owner); ::operator delete[](p, n, al);
    p = got(::operator new[](n, al), n, a, owner); release_check(p, n, owner); ::operator delete[](p, al, std::nothrow);
    p = got(::operator new(n, al, std::nothrow), n, a, owner); release_check(p, n, owner); ::operator delete(p, al);
    p = got(::operator new[](n, al, std::nothrow), n, a, owner); release_check(p, n, owner); ::operator delete[](p, al);
}

static int handler_calls;
static void handler() {
    handler_calls++;
    std::set_new_handler(nullptr);  // the next failure throws
}

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: cpp_operators glibc|jemalloc|mimalloc|tcmalloc\n");
        return 2;
    }
    peer = argv[1];
    vm_size = (size_fn)dlsym(RTLD_DEFAULT, "vmarena_size");
    if (!vm_size) {
        std::fprintf(stderr, "vmarena_size not found: run under the shim\n");
        return 2;
    }

    uint64_t before = jemalloc_thread_allocated();
    unsigned owner = 1;
    for (int round = 0; round < 3; round++) {
        plain_and_array(kSmall, owner++);
        plain_and_array(kLarge, owner++);
        aligned(kSmall, 64, owner++);
        aligned(kLarge, 64, owner++);
        aligned(kLarge, 1 << 16, owner++);
    }
    if (peer == "jemalloc") {
        // 3 rounds x (10 plain + 8 aligned) small blocks of 96 bytes went through jemalloc; the
        // large ones did not (they would add megabytes).
        uint64_t delta = jemalloc_thread_allocated() - before;
        CHECK(delta >= 3 * 18 * kSmall);
        CHECK(delta < kLarge);
    }

    // What a program does: containers, whose storage comes from operator new and goes back by
    // the sized delete.
    {
        std::vector<uint64_t> v;
        for (uint64_t i = 0; i < (4u << 20) / 8; i++) v.push_back(i * 7);
        for (uint64_t i = 0; i < v.size(); i += 4097) CHECK(v[i] == i * 7);
        CHECK(vm_size(v.data()) > 0);
    }
    // The vector grew by doubling: every capacity of 64 KiB and more was a large new.
    for (size_t cap = 1; cap <= (4u << 20) / 8; cap *= 2)
        if (cap * 8 >= (64u << 10)) large_news++;

    // Failure semantics are the next allocator's: an impossible size throws std::bad_alloc
    // (through the shim's frame), the nothrow form returns NULL, and the new-handler runs first.
    // mimalloc's library is built as C and aborts where it cannot throw (with or without the
    // shim), so only its nothrow forms are tried.
    CHECK(::operator new(SIZE_MAX / 2, std::nothrow) == nullptr);
    CHECK(::operator new[](SIZE_MAX / 2, std::align_val_t{64}, std::nothrow) == nullptr);
    bool throws = peer != "mimalloc";
    bool threw = false;
    if (throws) try {
        void *volatile p = ::operator new(SIZE_MAX / 2);
        ::operator delete(p);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw == throws);
    threw = false;
    if (throws) try {
        std::set_new_handler(handler);
        void *volatile p = ::operator new[](SIZE_MAX / 2);
        ::operator delete[](p);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw == throws && handler_calls == (throws ? 1 : 0));

    ::operator delete(nullptr);
    ::operator delete[](nullptr, std::nothrow);

    std::printf("large news %zu\n", large_news);
    if (failures) return 1;
    std::printf("ok cpp_operators\n");
    return 0;
}
