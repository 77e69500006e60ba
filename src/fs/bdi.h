/* Raise the read-ahead of a FUSE mount's backing device (bdi): page-cache
 * reads of a FUSE file are capped at read_ahead_kb (128 by default). The bdi
 * is found from /proc/self/mountinfo: a stat of the mount point from inside
 * the daemon, before its loop answers, would deadlock. Best effort. */
#ifndef CK_BDI_H
#define CK_BDI_H

/* Returns 0 when raised, -1 otherwise. */
int ck_raise_bdi_readahead(const char *mountpoint, unsigned kb);

#endif
