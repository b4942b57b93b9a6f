/*
 * vmarena: the Linux vmalloc design (per-CPU vmap nodes, size pools, lazy purge) for user space.
 *
 * These functions act on one process-wide default space, created on first use. Its size,
 * strategy and options come from environment variables (see README.md, "Options"); without
 * VMARENA_SPACE_BYTES it reserves 1 TiB of address space (a quarter of what RLIMIT_AS leaves,
 * where one is set), committed as it is used (README.md, "Where it runs").
 *
 * Memory is page granular: a request is rounded up to whole pages and followed by a guard page
 * that faults on access where the kernel supports guard markers (Linux 6.13+).
 *
 * Failure: functions returning a pointer return NULL and set errno (EINVAL for bad input: size
 * 0 or an alignment that is not a power of two; ENOMEM when the size overflows, the space is
 * exhausted even after a purge, or the kernel refuses to commit more; the first such failure
 * prints one line on stderr saying why). Nothing changes on failure. Link with -lvmarena.
 */
#ifndef VMARENA_H
#define VMARENA_H

#include <stddef.h>
#include <stdint.h>

/* The version this header belongs to; vmarena_version() returns the library's, encoded as
 * VMARENA_VERSION is. The shared library's name for the loader is libvmarena.so.MAJOR. */
#define VMARENA_VERSION_MAJOR 0
#define VMARENA_VERSION_MINOR 1
#define VMARENA_VERSION_PATCH 0
#define VMARENA_VERSION ((VMARENA_VERSION_MAJOR << 16) | (VMARENA_VERSION_MINOR << 8) | VMARENA_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* Allocate `size` bytes (page granular). NULL and errno on failure. */
void *vmarena_vmalloc(size_t size);

/* Allocate `size` zero-filled bytes. Fresh pages are not cleared twice. */
void *vmarena_vzalloc(size_t size);

/* Allocate `size` bytes aligned to `align`, a power of two. */
void *vmarena_vmalloc_aligned(size_t size, size_t align);

/* Allocate for huge mappings (the kernel's vmalloc_huge): from 2 MiB (one huge page) up, the
 * size is rounded up to whole huge pages, the area aligned to one and advised for transparent
 * huge pages, so that its faults map huge pages where the system allows (THP "madvise" or
 * "always"); below, or where the kernel refuses the advice, base pages. Freed with vmarena_vfree. */
void *vmarena_vmalloc_huge(size_t size);

/* vmarena_vmalloc_huge backed by reserved huge pages (MAP_HUGETLB), taken from the system's
 * reserve (/proc/sys/vm/nr_hugepages) at this call, when it can cover the request; otherwise the
 * same as vmarena_vmalloc_huge. vmarena_vfree frees it (base pages go back over it first);
 * vmarena_vrealloc and vmarena_kvfree_rcu refuse it. */
void *vmarena_vmalloc_hugetlb(size_t size);

/* Resize; keeps contents up to the smaller size. NULL `p` allocates. On failure returns NULL,
 * sets errno and leaves `p` untouched; size 0 is refused (EINVAL), use vmarena_vfree. */
void *vmarena_vrealloc(void *p, size_t size);

/* Free an area. 0; -EINVAL if `p` is not the start of a live area (interior, foreign or
 * already freed), and nothing changes. NULL is a no-op returning 0. */
int vmarena_vfree(void *p);

/* Usable bytes of the live area starting at `p` (whole pages), 0 otherwise. */
size_t vmarena_size(const void *p);

/* Release cached memory now (the memory of every lazily freed area). Returns 0. */
int vmarena_purge(void);

/* ---- Spaces of one's own ------------------------------------------------------------------- */

/* A space: one reservation of address space and the arena that hands out its pages, with its
 * own limits, statistics and purges, apart from the default space. */
typedef struct vmarena_space vmarena_space;
struct vmarena_stats;      /* (the statistics section declares these) */
struct vmarena_lock_stats;

/* How a space is built. Every field 0 means its default; set `size` to sizeof the struct (a
 * program built against an older header passes a smaller one, and the fields it lacks take
 * their defaults). */
struct vmarena_space_options {
    uint64_t size;
    uint64_t space_bytes;    /* the reservation; 0: 64 GiB (address space only until used) */
    uint64_t guard_pages;    /* guard pages after each area; 0: one, the kernel's */
    uint64_t strategy;       /* VMARENA_STRATEGY_NODES (0), _SPLIT or _GLOBAL */
    uint64_t lazy_max_pages; /* lazy pages above which a purge runs; 0: the kernel's threshold */
    uint64_t flags;          /* VMARENA_SPACE_NO_GUARDS, VMARENA_SPACE_NO_HUGE_PAGES */
};
#define VMARENA_STRATEGY_NODES 0
#define VMARENA_STRATEGY_SPLIT 1
#define VMARENA_STRATEGY_GLOBAL 2
#define VMARENA_SPACE_NO_GUARDS 1
#define VMARENA_SPACE_NO_HUGE_PAGES 2

/* Build a space called `name` (NULL: "space") with `opts` (NULL: every default). NULL and errno
 * EINVAL for bad options or an empty name, ENOMEM when the reservation is refused. */
vmarena_space *vmarena_space_create(const char *name, const struct vmarena_space_options *opts);

/* A handle of the default space (the one the functions above use); NULL and ENOMEM when it
 * cannot be built. */
vmarena_space *vmarena_space_default(void);

/* The vmalloc family on a space, as above. A NULL or foreign handle gets EINVAL (NULL, 0 or
 * -EINVAL), and nothing changes. */
void *vmarena_space_vmalloc(vmarena_space *space, size_t size);
void *vmarena_space_vzalloc(vmarena_space *space, size_t size);
void *vmarena_space_vmalloc_aligned(vmarena_space *space, size_t size, size_t align);
void *vmarena_space_vrealloc(vmarena_space *space, void *p, size_t size);
int vmarena_space_vfree(vmarena_space *space, void *p);
size_t vmarena_space_size(vmarena_space *space, const void *p);

/* 1 when p lies in the space's reservation, 0 otherwise. */
int vmarena_space_contains(vmarena_space *space, const void *p);

/* Release the memory of every lazily freed area now. 0. */
int vmarena_space_purge(vmarena_space *space);

/* The shrinker: every lazy area released and every pool drained. The pages released. */
int64_t vmarena_space_shrink(vmarena_space *space);

/* The space's statistics and lock figures, as vmarena_stats and vmarena_lock_stats give the
 * default space's. */
int vmarena_space_stats(vmarena_space *space, struct vmarena_stats *out);
int vmarena_space_lock_stats(vmarena_space *space, struct vmarena_lock_stats *out);

/* Free the space and its reservation. 0 (NULL is a no-op); -EBUSY while any area of it is live
 * (nothing changes). A handle of the default space is freed and the space stays. No other
 * thread may use the space during or after the call. */
int vmarena_space_destroy(vmarena_space *space);

/* ---- Fixed pools: preallocated slots of one size with a per-CPU cache ------------------- */

/* A pool of `slot_count` slots of `slot_size` bytes (rounded up to pages), allocated from the
 * default space at creation and kept until vmarena_fixed_destroy. slot_count 0 means 8 per
 * CPU. Free slots keep their memory until a low-memory event (or, with the environment
 * variable VMARENA_FIXED_PUT_RELEASE=free|dontneed, release it on every put). NULL and errno
 * (EINVAL for size 0, ENOMEM when the space has no room) on failure. */
typedef struct vmarena_fixed vmarena_fixed;

struct vmarena_fixed_stats {
    uint64_t slots;         /* slots in the pool */
    uint64_t held;          /* slots held by callers now */
    uint64_t cache_hits;    /* gets served from this CPU's cached slot */
    uint64_t list_pops;     /* gets served from the global list */
    uint64_t steals;        /* gets that took a slot cached on another CPU */
    uint64_t sleeps;        /* times a getter slept on an empty pool */
    uint64_t timeouts;      /* timed gets that gave up */
    uint64_t cache_parks;   /* puts parked in this CPU's cache entry */
    uint64_t list_pushes;   /* puts pushed on the global list */
    uint64_t releases;      /* slots whose memory was released */
    uint64_t release_calls; /* madvise / process_madvise calls made */
};

vmarena_fixed *vmarena_fixed_create(size_t slot_size, size_t slot_count);

/* Take a slot; sleeps until one is put back when all are held. */
void *vmarena_fixed_get(vmarena_fixed *pool);

/* Take a slot if one is free now; NULL and errno EAGAIN otherwise. */
void *vmarena_fixed_try_get(vmarena_fixed *pool);

/* Take a slot, waiting at most `timeout_ns`; NULL and errno ETIMEDOUT otherwise. */
void *vmarena_fixed_get_timeout(vmarena_fixed *pool, uint64_t timeout_ns);

/* Give a slot back. 0; -EINVAL if `p` is not the start of a slot of this pool held by a
 * caller (foreign, interior, or put twice), and nothing changes. */
int vmarena_fixed_put(vmarena_fixed *pool, void *p);

/* Bytes of one slot; 0 for an invalid pool. */
size_t vmarena_fixed_slot_size(const vmarena_fixed *pool);

/* Copy the pool's figures into *out. 0; -EINVAL for an invalid pool or NULL out. */
int vmarena_fixed_stats(const vmarena_fixed *pool, struct vmarena_fixed_stats *out);

/* Return every slot to the default space and free the pool. 0; -EBUSY while a slot is held
 * (nothing changes); NULL is a no-op returning 0. */
int vmarena_fixed_destroy(vmarena_fixed *pool);

/* Functions taking a pool return EINVAL (NULL, 0 or -EINVAL) for a NULL pool; any other
 * pointer must come from vmarena_fixed_create and not be destroyed. */

/* ---- Frame pools: buddy frames of a memory file, per-CPU page lists, vmap --------------- */

/* A pool of `bytes` (rounded down to 4 KiB frames) of a memory file, handed out by a buddy
 * allocator (orders 0..10) with per-CPU page lists and batch queues in front. Options come from
 * the VMARENA_FRAMES_* environment variables (README.md, "Frame pool options"). Frames are
 * numbers: frame n is bytes [n * 4096, (n + 1) * 4096) of the file. NULL and errno (EINVAL for
 * 0 frames or more than 2^31, ENOMEM when the file cannot be created) on failure. */
typedef struct vmarena_frames vmarena_frames;

struct vmarena_frame_stats {
    uint64_t frames;                  /* frames in the zone */
    uint64_t free_frames;             /* frames in free buddy blocks (not counting per-CPU lists and queues) */
    uint64_t pcp_frames;              /* frames cached on per-CPU lists */
    uint64_t queued_frames;           /* frames waiting in batch queues for the zone */
    uint64_t user_frames;             /* frames held by callers */
    uint64_t pcp_hits;                /* blocks handed out from a per-CPU list */
    uint64_t pcp_refills;             /* refills of a per-CPU list from the zone (one zone lock hold each) */
    uint64_t refill_blocks;           /* blocks moved by refills */
    uint64_t pcp_drains;              /* drains of a per-CPU list to the zone (one zone lock hold each) */
    uint64_t drain_blocks;            /* blocks moved by drains */
    uint64_t free_high;               /* drains started by free_high (a producer CPU freeing order 1..3 blocks) */
    uint64_t trylock_failures;        /* per-CPU list trylocks that failed (the call went to the zone) */
    uint64_t zone_allocs;             /* blocks allocated from the zone directly, one lock hold each */
    uint64_t zone_frees;              /* blocks freed to the zone directly, one lock hold each */
    uint64_t queue_inserts;           /* frees put in a batch queue */
    uint64_t queue_flushes;           /* batch queue flushes (one zone lock hold each) */
    uint64_t queue_try_failures;      /* half-full trylocks of the zone that failed (the frees stayed queued) */
    uint64_t queue_blocking_flushes;  /* flushes that blocked on the zone lock (queue full) */
    uint64_t compound_preps;          /* compound descriptors written (blocks of more than one frame made whole) */
    uint64_t compound_dismantles;     /* compound descriptors cleared */
    uint64_t compound_ns;             /* nanoseconds preparing and dismantling compound blocks (measured while lock timing is on) */
    uint64_t pcp_decays;              /* decay ticks applied to per-CPU lists */
    uint64_t alloc_failures;          /* allocations that found no frames, after draining every list and queue */
    uint64_t bad_frees;               /* frees refused: not the head of a block held by a caller, or of another order */
};

vmarena_frames *vmarena_frames_create(size_t bytes);

/* A block of 2^order frames (order 0..10): its first frame (>= 0), or -EINVAL (bad order) or
 * -ENOMEM (no block, after draining every per-CPU list), with errno set. */
int64_t vmarena_frames_alloc(vmarena_frames *pool, unsigned order);

/* Write `n` single frames to out[0..n) under one per-CPU list lock hold. Returns how many were
 * written: fewer than n only when the pool ran dry (errno ENOMEM). */
size_t vmarena_frames_alloc_bulk(vmarena_frames *pool, size_t n, uint32_t *out);

/* Give back a block that vmarena_frames_alloc(order) returned. 0; -EINVAL if `frame` is not the
 * first frame of a block held with that order (a tail, freed twice, another order), and nothing
 * changes. */
int vmarena_frames_free(vmarena_frames *pool, uint32_t frame, unsigned order);

/* The memory file's descriptor (to map frames in another process); -1 for an invalid pool. */
int vmarena_frames_fd(const vmarena_frames *pool);

/* Copy the pool's figures into *out. 0; -EINVAL for an invalid pool or NULL out. */
int vmarena_frames_stats(const vmarena_frames *pool, struct vmarena_frame_stats *out);

/* Free the pool. 0; -EBUSY while a caller holds frames (nothing changes); NULL is a no-op. */
int vmarena_frames_destroy(vmarena_frames *pool);

/* Map count frames (each held from the pool; repeats allowed) into a new area of the default
 * space, in order. NULL and errno (EINVAL: count 0 or a frame not held; ENOMEM: no room). The
 * frames stay the caller's; vmarena_vunmap unmaps them. */
void *vmarena_vmap(vmarena_frames *pool, const uint32_t *frames, size_t count);

/* Unmap an area that vmarena_vmap returned. 0; -EINVAL for anything else (nothing changes). */
int vmarena_vunmap(void *p);

/* Map count frames for a short while: up to 64 go to this CPU's vmap block, more get an area of
 * their own. NULL and errno as vmarena_vmap. */
void *vmarena_vm_map_ram(vmarena_frames *pool, const uint32_t *frames, size_t count);

/* Unmap what vmarena_vm_map_ram(..., count) returned, with the same count. 0; -EINVAL
 * otherwise (nothing changes). */
int vmarena_vm_unmap_ram(void *p, size_t count);

/* vmarena_vm_unmap_ram forgets the frames at once but may leave them mapped at the old address
 * until the vmap block is released (the kernel's deferred TLB flush; VMARENA_MAP_RAM_LAZY_MAX
 * bounds how many, 0 unmaps at once). This removes every such mapping now, as the kernel's
 * vm_unmap_aliases; vmarena_frames_destroy calls it. Returns the mappings removed. */
int64_t vmarena_vm_unmap_aliases(void);

/* The frame mapped at any byte `p` of a vmap or vm_map_ram mapping of the default space, or
 * -EINVAL (errno set) when `p` maps no frame. */
int64_t vmarena_vmalloc_to_frame(const void *p);

/* Functions taking a frame pool return EINVAL for a NULL pool; any other pointer must come from
 * vmarena_frames_create and not be destroyed. */

/* ---- Memory pressure --------------------------------------------------------------------- */

/* Raise a low-memory event: the default space (and every other space) releases its lazily
 * freed and pooled memory, every fixed pool the memory of its free slots, every frame pool the
 * memory of its free frames. Returns the bytes
 * released. vmarena also raises this event itself on Linux PSI memory-pressure notifications
 * where the kernel allows it (see README.md, "Memory pressure"). */
size_t vmarena_pressure(void);

/* ---- Deferred frees: read-side sections and grace periods (the kernel's kvfree_rcu) ------ */

/* Enter a read-side section (sections nest): an area retired from now on is not freed before
 * the section ends. 0, or -ENOMEM when the default space cannot be built. */
int vmarena_read_lock(void);

/* Leave it. 0, or -EINVAL without a matching vmarena_read_lock. */
int vmarena_read_unlock(void);

/* Free the area at p once every read-side section that may still see it has ended. 0; NULL is a
 * no-op; -EINVAL for anything but the start of a live area of vmarena_vmalloc and its kin, or an
 * area already retired (vmarena_vfree and vmarena_vrealloc refuse a retired area too). Inside a
 * read-side section it never waits; outside, it may wait for a grace period when very many areas
 * are pending, as the kernel's kvfree_rcu_mightsleep. */
int vmarena_kvfree_rcu(void *p);

/* The same without any memory of its own: the area's first 16 bytes are overwritten with the
 * link (the kernel's two-argument kvfree_rcu, with the rcu_head inside the object). */
int vmarena_kvfree_rcu_embedded(void *p);

/* Wait until every area retired before this call is freed. 0, or -EDEADLK when called inside a
 * read-side section (it would wait for itself). */
int vmarena_synchronize(void);

/* ---- Per-CPU objects (the kernel's alloc_percpu) ------------------------------------------ */

/* A per-CPU object: one copy per possible CPU, each zeroed, aligned to align (a power of two,
 * at most a page), size at most 256 KiB. Returns the handle (CPU 0's copy), or NULL with errno
 * EINVAL (size 0, bad alignment, too large) or ENOMEM. The copies sit at one stride from each
 * other in chunks of congruent areas, so vmarena_percpu_ptr is arithmetic. */
void *vmarena_percpu_alloc(size_t size, size_t align);

/* CPU cpu's copy of the object, or NULL for cpu >= vmarena_percpu_cpus(). Checks nothing else
 * (as the kernel's per_cpu_ptr); the copy of the CPU a thread runs on is the one to update
 * (with rseq, or atomically, as the thread may move). */
void *vmarena_percpu_ptr(void *handle, unsigned cpu);

/* The CPUs an object has a copy for (the possible CPUs). */
unsigned vmarena_percpu_cpus(void);

/* The bytes between one CPU's copy of any per-CPU object and the next CPU's: CPU cpu's copy is
 * at (char *)handle + cpu * vmarena_percpu_stride(), which a hot path can compute inline once
 * it has read the stride. 0 when the pool cannot be built. */
size_t vmarena_percpu_stride(void);

/* Free a per-CPU object. 0; NULL is a no-op; -EINVAL for anything but a live handle. */
int vmarena_percpu_free(void *handle);

/* ---- Integer arenas: vmem over any integers ------------------------------------------------ */

/* An integer arena (vmem, as in Bonwick and Adams' paper and illumos and FreeBSD vmem(9)): it
 * hands out ranges of any integers (a JIT's code range, a device heap's offsets, file extents,
 * ids), never memory. Spans are added by the caller or imported from a parent arena, and an
 * imported span goes back to the parent when its last allocation is freed. Small sizes are
 * served by per-thread and per-CPU caches; constrained requests search the free tree. Integers
 * come back through `*out` (0 is a valid integer); functions return 0 or -errno and set errno:
 * EINVAL for bad arguments, a foreign or freed start or an invalid handle, ENOMEM when no span
 * holds the request, EEXIST for an overlapping span, EBUSY for a destruction while allocations
 * are live. Nothing changes on failure. */
typedef struct vmarena_vmem vmarena_vmem;

/* How an arena is built. Every field 0 means its default; set `size` to sizeof the struct. */
struct vmarena_vmem_options {
    uint64_t size;
    uint64_t quantum;        /* the unit of allocation, a power of two; 0: 1 */
    uint64_t import_quantum; /* imports from the parent are rounded up to it; 0: the quantum */
    uint64_t fit;            /* VMARENA_VMEM_INSTANT_FIT (0), _LOWEST_FIT (1) or _BEST_FIT (2) */
    uint64_t strategy;       /* lowest fit: VMARENA_STRATEGY_NODES (0), _SPLIT or _GLOBAL */
    uint64_t stripes;        /* instant and best fit: per-CPU stripes of a span; 0: one per CPU (16 Ki quanta each at least) */
};
#define VMARENA_VMEM_INSTANT_FIT 0 /* segregated free lists, constant time, in per-CPU stripes */
#define VMARENA_VMEM_LOWEST_FIT 1  /* the lowest start that fits: the engine's arena, its tree and caches */
#define VMARENA_VMEM_BEST_FIT 2    /* the shortest free range that fits, on the same stripes as instant fit */

/* An arena called `name` (NULL: "vmem") with the span [base, base + size) (none when size is
 * 0), importing from `parent` when no span holds a request (NULL: none). NULL and errno EINVAL
 * for bad options, an empty name, a span that is not a multiple of the quantum or an invalid
 * parent. */
vmarena_vmem *vmarena_vmem_create(const char *name, uint64_t base, uint64_t size,
                                  const struct vmarena_vmem_options *opts, vmarena_vmem *parent);

/* Add the span [base, base + size) (vmem_add). */
int vmarena_vmem_add(vmarena_vmem *vm, uint64_t base, uint64_t size);

/* Allocate `size` integers (rounded up to the quantum) anywhere (vmem_alloc). */
int vmarena_vmem_alloc(vmarena_vmem *vm, uint64_t size, uint64_t *out);

/* Allocate under vmem_xalloc's constraints: the start is `phase` past a multiple of `align`
 * (a power of two; 0: the quantum), the range crosses no multiple of `nocross` (0: none; else
 * a power of two at least the size) and lies in [minaddr, maxaddr) (maxaddr 0: no bound). */
int vmarena_vmem_xalloc(vmarena_vmem *vm, uint64_t size, uint64_t align, uint64_t phase,
                        uint64_t nocross, uint64_t minaddr, uint64_t maxaddr, uint64_t *out);

/* Free the allocation that starts at `start` (vmem_free; the size is known). */
int vmarena_vmem_free(vmarena_vmem *vm, uint64_t start);

/* The size of the live allocation at `start` (rounded to the quantum); 0 for none. */
uint64_t vmarena_vmem_size(vmarena_vmem *vm, uint64_t start);

/* Every range held by the caches back in the free trees (before reading free_ranges). */
int vmarena_vmem_shrink(vmarena_vmem *vm);

/* The arena's figures. Set `size` to sizeof the struct, as for struct vmarena_stats. */
struct vmarena_vmem_stats {
    uint64_t size;
    uint64_t spans;          /* spans, added and imported */
    uint64_t imported_spans; /* of those, imported from the parent */
    uint64_t total;          /* integers in the spans */
    uint64_t allocated;      /* integers of live allocations */
    uint64_t live;           /* live allocations */
    uint64_t free_ranges;    /* free ranges of the free trees */
    uint64_t largest_free;   /* the largest of them */
    uint64_t imports;        /* spans imported, ever */
    uint64_t returns;        /* spans returned to the parent, ever */
};
int vmarena_vmem_stats(vmarena_vmem *vm, struct vmarena_vmem_stats *out);

/* Free the arena (vmem_destroy): 0 (NULL is a no-op), -EBUSY while allocations are live.
 * Imported spans go back to the parent; a child keeps its parent alive, whatever becomes of
 * the parent's handle. */
int vmarena_vmem_destroy(vmarena_vmem *vm);

/* ---- Statistics ----------------------------------------------------------------------------- */

/* The default space's statistics: its arena's table (docs/options.md, "Arena statistics"), in
 * that order, each a uint64_t. Set `size` to sizeof(struct vmarena_stats) before the call: the
 * library fills at most that many bytes (a program built against an older header gets the
 * fields it knows) and sets `size` to the bytes it filled. Every figure is 0 before the default
 * space exists. */
struct vmarena_stats {
    uint64_t size;
    uint64_t live_areas;
    uint64_t live_pages;
    uint64_t lazy_pages;
    uint64_t lazy_limit;
    uint64_t lazy_over_limit_peak;
    uint64_t pooled_areas;
    uint64_t pooled_pages;
    uint64_t free_pages;
    uint64_t free_ranges;
    uint64_t pool_hits;
    uint64_t clean_hit_pages;
    uint64_t pool_misses;
    uint64_t lazy_reuses;
    uint64_t lazy_splits;
    uint64_t lazy_joins;
    uint64_t lazy_extends;
    uint64_t extend_pages;
    uint64_t slack_pages;
    uint64_t node_steals;
    uint64_t cached_areas;
    uint64_t cached_pages;
    uint64_t cache_hits;
    uint64_t cache_cpu_hits;
    uint64_t cache_slack_hits;
    uint64_t cache_misses;
    uint64_t cache_flushes;
    uint64_t cache_drained;
    uint64_t cache_grows;
    uint64_t cache_budget_pages;
    uint64_t tree_allocs;
    uint64_t tree_pages;
    uint64_t page_moves;
    uint64_t moved_pages;
    uint64_t move_failures;
    uint64_t moved_maps;
    uint64_t heals;
    uint64_t chunk_allocs;
    uint64_t chunk_pages;
    uint64_t frees;
    uint64_t purges;
    uint64_t full_purges;
    uint64_t range_reclaims;
    uint64_t areas_released;
    uint64_t pages_released;
    uint64_t release_calls;
    uint64_t released_on_free;
    uint64_t alloc_failures;
    uint64_t grows;
    uint64_t grown_pages;
    uint64_t shrinks;
    uint64_t shrunk_pages;
    uint64_t bad_frees;
    uint64_t grown_in_place;
    uint64_t grown_in_place_pages;
    uint64_t emptied_on_free;
    uint64_t cache_sheds;
    uint64_t decay_keep_ticks;
    uint64_t decay_refault_pages;
    uint64_t depot_pages;
    uint64_t depot_puts;
    uint64_t depot_takes;
    uint64_t cache_cpu_grown_hits;
    uint64_t cache_cpu_grown_pages;
    uint64_t table_pages_dropped;
    uint64_t blocks_renewed;
};

/* Fill *out. 0; -EINVAL for NULL or a size below 8 (nothing written). */
int vmarena_stats(struct vmarena_stats *out);

/* One lock class's figures; hold times are measured only while lock timing is on. */
struct vmarena_lock_class {
    uint64_t acquisitions;
    uint64_t contended;  /* acquisitions whose first attempt found the lock taken */
    uint64_t wait_ns;    /* time spent waiting on those */
    uint64_t hold_ns;
};

/* The lock figures by class: `size` as in struct vmarena_stats, then the classes of the three
 * strategies (those a space's strategy lacks stay 0): Global's one lock; the free tree's lock
 * (Split, Nodes); Split's busy lock; the node locks of Nodes, summed. */
struct vmarena_lock_stats {
    uint64_t size;
    struct vmarena_lock_class global;
    struct vmarena_lock_class free;
    struct vmarena_lock_class busy;
    struct vmarena_lock_class node;
};

/* Fill *out with the default space's lock figures (zeros before it exists). 0; -EINVAL for NULL
 * or a size below 8. */
int vmarena_lock_stats(struct vmarena_lock_stats *out);

/* The statistics as one line of JSON: the arena's table, the space's own figures and the lock
 * figures by lock class. Like snprintf: writes at most `len` bytes, NUL included, and returns
 * the length of the whole text (a NULL `buf` asks for the length only). */
size_t vmarena_stats_json(char *buf, size_t len);

/* The default space's live and lazily freed areas in /proc/vmallocinfo's format, as
 * vmarena_stats_json writes its text (empty before the space exists). */
size_t vmarena_vmallocinfo(char *buf, size_t len);

/* With VMARENA_STATS=1 in the environment when the library is loaded, the statistics are
 * printed at exit, as one line "vmarena stats: <JSON>", on the stderr the program had at load
 * (never on a file the program has put at descriptor 2 since). */

/* ---- Version ------------------------------------------------------------------------------ */

/* The library's version, (major << 16) | (minor << 8) | patch. */
unsigned vmarena_version(void);

#ifdef __cplusplus
}
#endif

#endif /* VMARENA_H */
