/*
 * jemalloc-to-glibc: lets a Redis or Valkey built against jemalloc run on
 * glibc's malloc, which is what running it under libfaketime needs.
 *
 * Why: libfaketime resolves the functions it wraps lazily, with dlsym, and a
 * failed lookup (symbols glibc no longer has, such as __ftime) or its own
 * start-up (fopen of its files, sem_open) calls malloc. jemalloc reads the
 * clock while holding its own locks, so with jemalloc as the process' malloc
 * the server deadlocks in its first allocation. Preloading glibc right after
 * libfaketime makes glibc's malloc, free, realloc and malloc_usable_size the
 * ones every library binds to, and the deadlock is gone (Redis 7.0 is run
 * that way). Newer servers also call jemalloc's own entry points (sdallocx in
 * Valkey 9; mallocx, rallocx, dallocx in Redis 8), which would then free or
 * resize glibc's blocks inside jemalloc and crash. This library, preloaded
 * after glibc, gives those entry points glibc's meaning. Statistics calls
 * (mallctl, malloc_stats_print) stay jemalloc's: they read jemalloc's own,
 * unused heap and harm nothing.
 *
 * tools/install-servers.sh builds it into each server directory as
 * lib/jemalloc-to-glibc.so. It is only for tests under libfaketime.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

/* jemalloc's flag bits (jemalloc/jemalloc_macros.h). */
#define LG_ALIGN_MASK 0x3f
#define ZERO 0x40

static size_t alignment(int flags)
{
	int lg = flags & LG_ALIGN_MASK;
	return lg ? (size_t)1 << lg : 0;
}

static void *alloc(size_t size, int flags)
{
	size_t align = alignment(flags);
	void *p;
	if (size == 0)
		size = 1; /* jemalloc never returns NULL for 0 */
	if (align > sizeof(void *) * 2) {
		if (posix_memalign(&p, align, size) != 0)
			return NULL;
	} else {
		p = malloc(size);
	}
	if (p != NULL && (flags & ZERO))
		memset(p, 0, size);
	return p;
}

void *mallocx(size_t size, int flags)
{
	return alloc(size, flags);
}

void *rallocx(void *ptr, size_t size, int flags)
{
	size_t old = malloc_usable_size(ptr);
	void *p;
	if (alignment(flags) > sizeof(void *) * 2) {
		/* realloc keeps no alignment: move by hand. */
		p = alloc(size, flags & ~ZERO);
		if (p == NULL)
			return NULL;
		memcpy(p, ptr, old < size ? old : size);
		free(ptr);
	} else {
		p = realloc(ptr, size ? size : 1);
		if (p == NULL)
			return NULL;
	}
	if ((flags & ZERO) && size > old)
		memset((char *)p + old, 0, size - old);
	return p;
}

size_t xallocx(void *ptr, size_t size, size_t extra, int flags)
{
	(void)size;
	(void)extra;
	(void)flags;
	/* Never grows in place: the caller then moves the block itself. */
	return malloc_usable_size(ptr);
}

void dallocx(void *ptr, int flags)
{
	(void)flags;
	free(ptr);
}

void sdallocx(void *ptr, size_t size, int flags)
{
	(void)size;
	(void)flags;
	free(ptr);
}

size_t nallocx(size_t size, int flags)
{
	(void)flags;
	/*
	 * What a block of size bytes will hold. glibc gives at least size;
	 * saying exactly size never promises more than the block holds.
	 */
	return size ? size : 1;
}

size_t sallocx(const void *ptr, int flags)
{
	(void)flags;
	return malloc_usable_size((void *)ptr);
}
