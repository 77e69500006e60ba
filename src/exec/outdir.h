/* Where `convert` writes, so that it never loses or mixes a user's data:
 *  - an OUTDIR that is, contains or lies inside a source directory (compared
 *    by device and inode, so symlinks and ./.. spellings are caught) is
 *    refused before anything is written;
 *  - a new OUTDIR is written as a temporary directory beside it and renamed
 *    into place;
 *  - an existing OUTDIR without checkpoint files gets the new files moved in
 *    once they are all complete (its other files stay);
 *  - an existing OUTDIR with checkpoint files is refused, unless --overwrite:
 *    then the new checkpoint is staged beside it, the old directory's other
 *    entries are carried over (hard links; subdirectories moved), the two
 *    directories are swapped in one renameat2(RENAME_EXCHANGE), and only the
 *    files a checkpoint owns are deleted from the old one.
 * A reader of OUTDIR sees the old checkpoint or the new one, never a mix. */
#ifndef CK_OUTDIR_H
#define CK_OUTDIR_H

#include <limits.h>
#include <stdint.h>

#include "../ckpt/catalog.h"
#include "../util/error.h"

/* The names of what a convert writes before its commit, which a later one
 * finds again (ck_outdir_stale): a staging directory ".OUTNAME" CK_STAGE_TAG
 * "PID" beside OUTDIR, or CK_STAGE_TAG "PID" inside it; a file being
 * written, CK_TMP_TAG "PID-NAME". */
#define CK_STAGE_TAG ".ckptfs-stage-"
#define CK_TMP_TAG ".ckptfs-tmp-"

enum ck_outdir_mode {
	CK_OUT_NEW,	/* OUTDIR did not exist: stage beside it, rename */
	CK_OUT_INTO,	/* OUTDIR has no checkpoint: stage inside it, move files in */
	CK_OUT_REPLACE, /* --overwrite of a checkpoint: stage beside it, exchange */
	CK_OUT_SHARED	/* --shard-groups: every rank writes its own file in place */
};

struct ck_outdir {
	enum ck_outdir_mode mode;
	char final[PATH_MAX]; /* absolute OUTDIR */
	char stage[PATH_MAX]; /* where the files are written (final for SHARED) */
};

/* Whether a file name is one a checkpoint owns (weights, indexes, DCP
 * files, config.json): what --overwrite may delete and what makes a
 * directory "hold a checkpoint". */
int ck_outdir_owned(const char *name);

/* mkdir -p (OUTDIR templates such as /ckpt/megatron/rank{rank} name new trees). */
int ck_mkdirs(const char *path, struct ck_err *err);

/* Refuse an OUTDIR that aliases the source (see above). */
int ck_outdir_check_source(const char *outdir, const char *source, const struct ck_catalog *cat,
			   struct ck_err *err);

/* The file a mount's daemon appends its log to (-o log=FILE), opened here,
 * before the fork, O_APPEND (created 0644 if missing). Refused unless it is
 * a regular file (a FIFO would hold the daemon for good), lies outside the
 * source's directories (a directory source: in or below it, and the
 * directories its files resolve to; a single file: beside it, where the
 * view reads config.json and the tokenizer) and is neither a source file
 * nor a mapping (device and inode): a log line appended to any of them
 * would corrupt it. Returns the descriptor, or -1 with err set. */
int ck_log_open(const char *path, const char *source, const struct ck_catalog *cat,
		char *const *maps, int n_maps, struct ck_err *err);

/* Decide the mode and create the staging directory. shared_names (NULL
 * unless SHARED) lists the files this distributed run writes: other
 * checkpoint files in OUTDIR are refused unless overwrite. */
int ck_outdir_begin(struct ck_outdir *o, const char *outdir, int overwrite, int shared,
		    const char *const *shared_names, int n_shared, struct ck_err *err);
/* What a convert into the same OUTDIR left when it was killed (SIGKILL,
 * the OOM killer, a crash; from SIGINT, SIGTERM and SIGHUP the CLI cleans
 * up): staging directories beside or inside OUTDIR and --shard-groups'
 * temp files whose process is gone. Found, never removed: a staging
 * directory of --overwrite may hold subdirectories of OUTDIR, moved there
 * for the swap (carried over) when the process died. */
struct ck_outdir_stale {
	int n;		     /* how many */
	char path[PATH_MAX]; /* the first, or the first with foreign entries */
	long pid;	     /* the process that made that one */
	uint64_t bytes;	     /* the files in them all */
	int foreign;	     /* entries in that one that are not checkpoint files */
};
void ck_outdir_stale(const struct ck_outdir *o, struct ck_outdir_stale *s);
/* Put the staged files in place (see above). */
int ck_outdir_commit(struct ck_outdir *o, struct ck_err *err);
/* After a failure: remove the staging directory and what it holds. */
void ck_outdir_abort(struct ck_outdir *o);
/* SHARED, --overwrite, after every rank succeeded: delete the checkpoint
 * files that are not this run's. */
int ck_outdir_remove_others(const struct ck_outdir *o, const char *const *keep, int n_keep,
			    struct ck_err *err);

#endif
