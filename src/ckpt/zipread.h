/* Reading a zip archive's central directory (torch.save files): entry names,
 * sizes and where each stored entry's data lies. Untrusted input: every
 * offset and size is checked against the file; ZIP64 records are followed;
 * compressed entries are listed but refused when their data is asked for. */
#ifndef CK_ZIPREAD_H
#define CK_ZIPREAD_H

#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"
#include "../util/strmap.h"

struct ck_zip_entry {
	char *name;
	uint16_t method; /* 0: stored */
	uint64_t size, csize;
	uint64_t header_off; /* local header */
};

struct ck_zip {
	struct ck_zip_entry *e; /* header_off: from the start of the archive */
	size_t n;
	struct ck_strmap by_name;
	uint64_t base, size; /* the archive is bytes [base, base+size) of its file */
};

/* Read the directory of the archive held in bytes [base, base+size) of the
 * open file (a whole file, or a blob inside one: DCP's .distcp files); what
 * names it in errors. */
int ck_zip_open(int fd, uint64_t base, uint64_t size, const char *what, struct ck_zip *z,
		struct ck_err *err);
void ck_zip_free(struct ck_zip *z);
const struct ck_zip_entry *ck_zip_find(const struct ck_zip *z, const char *name);
/* File offset of a stored entry's data (reads its local header). */
int ck_zip_data_offset(const struct ck_zip *z, int fd, const struct ck_zip_entry *e,
		       const char *what, uint64_t *off, struct ck_err *err);

#endif
