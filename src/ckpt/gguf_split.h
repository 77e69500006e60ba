/* A split GGUF source (gguf-split's, as on Hugging Face:
 * model-00001-of-00003.gguf ...): named by its first file, as llama.cpp
 * loads it, it is read as one source of all the files' tensors. The first
 * file's split.count and its name must agree, each file's split.no must be
 * its place, and split.tensors.count must be the tensors all hold; the
 * split.* keys are left out of the source's metadata. */
#ifndef CK_GGUF_SPLIT_H
#define CK_GGUF_SPLIT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/error.h"

/* What a catalog tracks of a split source while its files are read. */
struct ck_gguf_split {
	int count;	 /* the files the name says (0: not a split name) */
	int read;	 /* files read so far */
	int64_t tensors; /* split.tensors.count of the first */
};

/* path's files when its name is PREFIX-00001-of-NNNNN.gguf with NNNNN
 * over 1 (*paths malloc'd, *n of them; free with ck_gguf_split_names_free),
 * else *n 0. A later piece's name is refused: the first names the rest. */
int ck_gguf_split_names(const char *path, char ***paths, size_t *n, struct ck_err *err);
void ck_gguf_split_names_free(char **paths, size_t n);

/* A directory's GGUF source, from its *.gguf names (sorted): the one file,
 * or the first of the one split GGUF they all make up (*path malloc'd);
 * other sets refused, naming them. */
int ck_gguf_dir_pick(const char *dir, char *const *names, size_t n, char **path,
		     struct ck_err *err);

/* A GGUF file's metadata checked as the next file of s: 0 for the first
 * (or only) file, its split.* keys removed; 1 for a later piece (whose
 * metadata the caller drops); -1 with err. */
int ck_gguf_split_piece(struct ck_gguf_split *s, cJSON *meta, const char *path, struct ck_err *err);

#endif
