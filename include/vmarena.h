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

#ifdef __cplusplus
}
#endif

#endif /* VMARENA_H */
