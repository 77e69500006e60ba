/* Internals of the FUSE front end shared by its files: the daemon's
 * top-level context, inode decoding and the read path (fsread.c). */
#ifndef CK_FS_INT_H
#define CK_FS_INT_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "bufpool.h"
#include "fs.h"
#include "../view/tree.h"

/* Inodes. A one-view mount puts its view's root at FUSE's root inode (1);
 * a --ranks mount lists rank directories at 1 (with -o dcp also the dcp/
 * of them all at 2, its files from 3 on) and gives each view a range after
 * those. Within a view's range (from its base):
 *   +0 its root, +1 tensors/, +2 .ckptfs/, +3 stats.json, +4 plan.json,
 *   +5 npy/, +6 dcp/ or torch_dist/, +8+i target i, +8+n+i its npy file,
 *   +8+2n+k root file k, then that directory's files (N_FILE past the
 *   root files). */
enum { V_ROOT, V_TENSORS, V_META, V_STATS, V_PLAN, V_NPY, V_SUB, V_FIRST = 8 };
#define INO_TOP 1
#define TIMEOUT 86400.0 /* the view is immutable */
#define BLKSIZE (1u << 20)
/* stats.json's size: every snapshot is padded with spaces to it, so a page
 * the kernel caches holds one whole snapshot and a reader never sees the
 * size change under it (without opens the kernel reads it through its page
 * cache: see op_init) */
#define STATS_LEN 1024

struct ckfs {
	const struct ck_plan *cache_plan;
	struct ck_tree *views;
	size_t n_views;
	int multi; /* rank directories at the top */
	const char *source, *mountpoint;
	struct ck_fs_opts o;
	struct ck_served *srv;	/* trees, cache and device: started in the daemon, after the fork */
	struct ck_cache *cache; /* srv's */
	struct ck_bufpool pool; /* reply buffers of direct reads */
	int ready_fd;
	/* readiness (ready.c): the check's thread, the "mounted" line it
	 * logs, the errno of its request when it failed, and whether that was
	 * the kernel refusing the INIT (the loop still running) rather than
	 * the mount ending before it answered; the mount point's device
	 * before the mount, so a stat that lands on the directory beneath
	 * after an unmount is not taken for an answer */
	pthread_t ready_thread;
	int ready_started, ready_errno, ready_refused;
	int under_known;
	dev_t under_dev;
	char *ready_msg;
	atomic_int loop_ended; /* the FUSE loop has returned */
	FILE *log;
	pthread_mutex_t log_mu;
	time_t mounted_at;
	/* open stats.json snapshots: a RELEASE the kernel sends as the session
	 * ends may never be served, so teardown frees what is left here */
	struct snapshot *snaps;
	pthread_mutex_t snap_mu;
	/* the kernel opens files without asking (FUSE_NO_OPEN_SUPPORT): the
	 * first OPEN is answered ENOSYS, and no OPEN or RELEASE follows */
	int no_open;
	uint64_t open_requests;	  /* OPENs answered (atomic) */
	uint64_t lookup_requests; /* LOOKUPs answered (atomic) */
};

enum kind { N_NONE, N_TOP, N_ROOT, N_TENSORS, N_META, N_STATS, N_PLAN, N_NPYDIR, N_TARGET, N_NPY,
	    N_FILE, N_SUBDIR, N_TOPDIR, N_TOPFILE };

/* An inode, decoded. */
struct node {
	enum kind k;
	const struct ck_tree *v;
	uint32_t i; /* target index (N_TARGET, N_NPY), root file index (N_FILE) or
		     * the top dcp/'s file (N_TOPFILE) */
};

struct snapshot {
	char *data;
	size_t len;
	struct snapshot *prev, *next;
};

/* One line of the daemon's log ("ckptfs: " msg); ctx is the ckfs. */
void fs_log(void *ctx, const char *msg);
uint64_t fs_ino_count(const struct ck_tree *v);
/* An N_FILE node's file: a root file, or one of dcp/'s. */
static inline const struct ck_tree_file *fs_file(const struct node *nd)
{
	return nd->i < nd->v->n_roots ? &nd->v->roots[nd->i] : &nd->v->sub[nd->i - nd->v->n_roots];
}
struct node fs_decode(const struct ckfs *fs, fuse_ino_t ino);
fuse_ino_t fs_ino_of(const struct ck_tree *v, enum kind k, uint32_t i);
int fs_is_dir(enum kind k);
char *fs_stats_json(struct ckfs *fs, size_t *len);
void fs_reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off);
/* The read operation (fsread.c): literal, direct and cache bytes. */
void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);

#endif
