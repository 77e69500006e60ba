/* Readiness of a mount. libfuse calls the init operation before it checks
 * the answer and replies to the kernel's INIT, and refuses the INIT (the
 * kernel then fails every request of the mount) when its checks fail. So
 * "mounted", and the background command's exit 0, wait for the mount's
 * first answered request: a thread started from init stats the mount point.
 * When that fails the daemon stops, and the command fails in one line with
 * nothing mounted. */
#ifndef CK_FS_READY_H
#define CK_FS_READY_H

#include "fs_int.h"

/* Before mounting: notes the device of the directory the mount covers. */
void fs_ready_note_under(struct ckfs *fs);
/* From the init operation: starts the check (msg: the "mounted" line). */
void fs_ready_start(struct ckfs *fs, const char *msg);
/* After the session's device is closed (a check still waiting then fails):
 * joins the check; returns 0, or the errno of the request that failed
 * (fs->ready_refused then says whether the kernel refused the INIT). */
int fs_ready_join(struct ckfs *fs);

#endif
