/* The source catalog: every tensor of a checkpoint, key -> {file, dtype,
 * shape, byte offset, byte length}, plus the source's config.json. Built from
 * headers only; tensor data is never read here. File descriptors are opened
 * once and held, so later reads never re-resolve paths (a file replaced after
 * opening keeps serving the bytes that were catalogued). */
#ifndef CK_CATALOG_H
#define CK_CATALOG_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../util/error.h"
#include "../util/strmap.h"
#include "gguf.h"
#include "gguf_split.h"
#include "leftout.h"
#include "tensors.h"

struct ck_source_file {
	char *name; /* as listed (file name inside the source directory) */
	char *path; /* path used to open it */
	int fd;
	uint64_t size;
	struct timespec mtime;
	uint64_t header_len;
};

struct ck_catalog_entry {
	struct ck_tensor_info t;
	uint32_t file;
	uint32_t pooled; /* the name lives in the catalog's names, not on its own */
};

/* A tensor stored as chunks (DCP): chunk k is catalog entry entry[k], placed
 * at off[k] of the whole. The chunks tile the tensor exactly. */
struct ck_chunk {
	uint32_t entry;
	int64_t off[CK_MAX_DIMS];
};

struct ck_logical {
	char *name;
	enum ck_dtype dtype;
	int ndim;
	int64_t shape[CK_MAX_DIMS];
	struct ck_chunk *chunks;
	size_t n_chunks;
};

struct ck_catalog {
	char *source;	    /* as given by the user */
	const char *format; /* "safetensors" */
	struct ck_source_file *files;
	size_t n_files;
	struct ck_catalog_entry *entries; /* natural name order */
	size_t n_entries, cap_entries;
	struct ck_strmap by_name;
	cJSON *config; /* config.json beside the weights, or NULL */
	char *dir;     /* the directory config.json (and tokenizer files) would be in */
	char *config_raw; /* its bytes as read: served and copied verbatim (a re-print
			   * would turn 10000.0 into 10000 and round long integers) */
	size_t config_len;
	cJSON *meta; /* a GGUF source's metadata (inspect shows it), or NULL */
	struct ck_gguf_kvs gguf_tok; /* its tokenizer.* records as encoded */
	struct ck_gguf_split gguf_split; /* a split GGUF source's files, as read */
	uint64_t total_bytes;
	/* DCP sources: the tensors are these, made of chunk entries; entries
	 * are then the chunks ("name#k") */
	struct ck_logical *logical;
	size_t n_logical;
	size_t n_skipped; /* non-tensor values left out (bytes items, ints, ...) */
	struct ck_leftout left_out; /* the same, with their keys and what they are */
	int read_threads; /* threads reading a directory's headers; 0: see below */
	struct ck_strpool names; /* the pooled entries' names (all of a safetensors file's) */
};

/* Open a source: a .safetensors file, or a directory of them with or without
 * model.safetensors.index.json. */
int ck_catalog_open(const char *source, struct ck_catalog **out, struct ck_err *err);
/* The same with a directory's files opened and their headers read on up to
 * `threads` threads (ck_catalog_open: ck_catalog_read_threads); the catalog
 * and any error do not depend on how many. */
int ck_catalog_open_threads(const char *source, int threads, struct ck_catalog **out,
			    struct ck_err *err);
void ck_catalog_free(struct ck_catalog *cat);
const struct ck_catalog_entry *ck_catalog_find(const struct ck_catalog *cat, const char *name);

/* For the source readers: open dir/name (following links; a regular file)
 * into cat->files[cat->n_files++] (the array must have room); add a parsed
 * header's tensors as entries of file; sort and index the entries. */
int ck_catalog_open_file(struct ck_catalog *cat, int dirfd, const char *dir, const char *name,
			 struct ck_err *err);
int ck_catalog_add_entries(struct ck_catalog *cat, struct ck_file_tensors *hdr, uint32_t file,
			   struct ck_err *err);
/* Open names[0..n) (in dirfd; dir: the paths' prefix, NULL for paths given
 * whole) into cat->files (room for n) and add their tensors as entries of
 * file i, the headers read on up to `threads` threads; the first file in
 * order that fails is the error. The default thread count for n files: */
int ck_catalog_read_files(struct ck_catalog *cat, int dirfd, const char *dir, char *const *names,
			  size_t n, int threads, struct ck_err *err);
int ck_catalog_read_threads(size_t n_files);
int ck_catalog_index(struct ck_catalog *cat, struct ck_err *err);

/* Format detection by content: whether the first n bytes of a file of the
 * given size can be a safetensors file, and a one-line description of
 * formats ckptfs recognises but does not read (NULL: unknown). */
int ck_looks_safetensors(const unsigned char *p, size_t n, uint64_t size);
const char *ck_sniff_other(const unsigned char *p, size_t n);


#endif
