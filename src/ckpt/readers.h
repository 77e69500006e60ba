/* The source readers. A checkpoint file is read by the first reader whose
 * probe accepts its first bytes; the reader lists the file's tensors (name,
 * dtype, shape, the byte range of the data) from its header alone, and from
 * then on every format is the same: the engine reads byte regions of
 * catalogued files. Directory formats (DCP / torch_dist, a Hugging Face
 * directory of these files with or without an index) are the table in
 * catalog.c. Adding a file format is one entry in readers.c. */
#ifndef CK_READERS_H
#define CK_READERS_H

#include "catalog.h"

struct ck_file_reader {
	const char *format; /* catalog->format: "safetensors", "pytorch", ... */
	/* whether the first n bytes of a file of this size are this format's */
	int (*probe)(const unsigned char *head, size_t n, uint64_t size);
	/* the file's tensors (and, for some, cat->meta or cat->left_out) */
	int (*read)(struct ck_catalog *cat, const struct ck_source_file *f,
		    struct ck_file_tensors *out, struct ck_err *err);
	/* read touches nothing of the catalog (cat may be NULL): it may run on
	 * any thread, beside other files' reads (the safetensors reader, whose
	 * header length catalog_files.c reads to bound what threads hold) */
	int any_thread;
};

/* The reader for a file by its first bytes: never NULL (what no probe
 * accepts is read as safetensors, whose parser says what is wrong), except
 * for formats ckptfs recognises and does not read: NULL with err naming the
 * format. */
const struct ck_file_reader *ck_file_reader_for(const unsigned char *head, size_t n, uint64_t size,
						const char *path, struct ck_err *err);

#endif
