/* The one full-read loop: pread until len bytes are in, retrying EINTR and
 * EAGAIN; end of file before len is EIO (the file is shorter than we were
 * told). Returns 0 or a negative errno. */
#ifndef CK_FILEIO_H
#define CK_FILEIO_H

#include <stddef.h>
#include <stdint.h>

int ck_pread_full(int fd, void *buf, uint64_t len, uint64_t off);
struct iovec;
/* The same for a scatter read: the n buffers of iov, filled in order from
 * off on (preadv; a short read, such as Linux's cap of a read near 2 GiB, is
 * continued; iov is consumed: its entries are advanced). */
int ck_preadv_full(int fd, struct iovec *iov, int n, uint64_t off);
/* "dir/name", malloc'd; NULL on ENOMEM. */
char *ck_path_join(const char *dir, const char *name);

#endif
