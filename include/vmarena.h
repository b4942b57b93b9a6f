/*
 * vmarena: the Linux vmalloc design (per-CPU vmap nodes, size pools, lazy purge) for user space.
 *
 * These functions act on one process-wide default space, created on first use. Its size,
 * strategy and options come from environment variables (see README.md, "Options").
 *
 * Memory is page granular: a request is rounded up to whole pages and followed by a guard page
 * that faults on access where the kernel supports guard markers (Linux 6.13+).
 *
 * Failure: functions returning a pointer return NULL and set errno (EINVAL for bad input: size
 * 0 or an alignment that is not a power of two; ENOMEM when the size overflows or the space is
 * exhausted even after a purge). Nothing changes on failure. Link with -lvmarena.
 */
#ifndef VMARENA_H
#define VMARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Allocate `size` bytes (page granular). NULL and errno on failure. */
void *vmarena_vmalloc(size_t size);

/* Allocate `size` zero-filled bytes. Fresh pages are not cleared twice. */
void *vmarena_vzalloc(size_t size);

/* Allocate `size` bytes aligned to `align`, a power of two. */
void *vmarena_vmalloc_aligned(size_t size, size_t align);

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

/* ---- Memory pressure --------------------------------------------------------------------- */

/* Raise a low-memory event: the default space (and every other space) releases its lazily
 * freed and pooled memory, every fixed pool the memory of its free slots. Returns the bytes
 * released. vmarena also raises this event itself on Linux PSI memory-pressure notifications
 * where the kernel allows it (see README.md, "Memory pressure"). */
size_t vmarena_pressure(void);

#ifdef __cplusplus
}
#endif

#endif /* VMARENA_H */
