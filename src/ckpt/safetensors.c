#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/fileio.h"
#include "../util/json_strict.h"
#include "../util/stream_read.h"
#include "../util/strmap.h"
#include "st_header.h"

struct span {
	uint64_t begin, end;
	size_t idx;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/* Validate the JSON header text (N bytes) of a file whose data section is
 * data_size bytes long; unique and in: as ck_st_header_json's. */
static int parse_header_json(const char *json, uint64_t n, struct ck_stream_read *in,
			     uint64_t data_size, const char *what, int unique,
			     struct ck_file_tensors *h, struct ck_err *err)
{
	memset(h, 0, sizeof *h);
	h->header_len = n;
	int rc = -1;
	struct ck_st_span *raw = NULL;
	struct span *spans = NULL;
	if (ck_st_header_json(json, (size_t)n, in, what, unique, h, &raw, err) < 0)
		goto out;
	spans = calloc(h->n_tensors ? h->n_tensors : 1, sizeof *spans);
	if (!spans) {
		ck_fail_sys(err, ENOMEM, "%s", what);
		goto out;
	}
	for (size_t i = 0; i < h->n_tensors; i++)
		spans[i] = (struct span){raw[i].begin, raw[i].end, i};
	/* Spans sorted by offset must tile [0, data_size) exactly. Writers list
	 * them in offset order, so they are sorted only when they are not (a
	 * 100k-key header's sort was 4% of planning over it). */
	size_t sorted = 1;
	while (sorted < h->n_tensors && cmp_span(&spans[sorted - 1], &spans[sorted]) <= 0)
		sorted++;
	if (sorted < h->n_tensors)
		qsort(spans, h->n_tensors, sizeof *spans, cmp_span);
	uint64_t pos = 0;
	for (size_t i = 0; i < h->n_tensors; i++) {
		const char *key = h->tensors[spans[i].idx].name;
		if (i && spans[i].begin == spans[i - 1].begin &&
		    !strcmp(key, h->tensors[spans[i - 1].idx].name)) {
			/* a name given twice over the same bytes (the usual way a
			 * key is repeated): said as what it is, not as an overlap */
			ck_fail(err, CK_E_SOURCE, "%s: duplicate key \"%s\"", what, key);
			goto out;
		}
		if (spans[i].begin != pos) {
			ck_fail(err, CK_E_SOURCE,
				"%s: tensor \"%s\": data_offsets begin at %llu but the previous "
				"tensor ends at %llu (%s)",
				what, key, (unsigned long long)spans[i].begin,
				(unsigned long long)pos, spans[i].begin > pos ? "gap" : "overlap");
			goto out;
		}
		pos = spans[i].end;
	}
	if (pos != data_size) {
		ck_fail(err, CK_E_SOURCE,
			"%s: tensors cover %llu data bytes but the file holds %llu after the "
			"header (%s)",
			what, (unsigned long long)pos, (unsigned long long)data_size,
			pos < data_size ? "trailing bytes" : "file truncated");
		goto out;
	}
	/* Reorder tensors by offset, in place (following the permutation's
	 * cycles: no second copy of the array), and make offsets absolute. */
	for (size_t i = 0; i < h->n_tensors; i++)
		h->tensors[spans[i].idx].offset = 8 + n + spans[i].begin;
	for (size_t i = 0; i < h->n_tensors; i++) {
		if (spans[i].idx == SIZE_MAX || spans[i].idx == i)
			continue;
		struct ck_tensor_info tmp = h->tensors[i];
		size_t k = i;
		while (spans[k].idx != i) {
			size_t from = spans[k].idx;
			h->tensors[k] = h->tensors[from];
			spans[k].idx = SIZE_MAX;
			k = from;
		}
		h->tensors[k] = tmp;
		spans[k].idx = SIZE_MAX;
	}
	rc = 0;
out:
	if (rc < 0)
		ck_file_tensors_free(h);
	free(raw);
	free(spans);
	return rc;
}

/* Check the 8-byte length prefix against the file size; returns N. */
static int check_prefix(const unsigned char *p8, uint64_t file_size, const char *what,
			uint64_t *n_out, struct ck_err *err)
{
	if (file_size < 8)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: file is %llu bytes, too small for the 8-byte header length",
			       what, (unsigned long long)file_size);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = (n << 8) | p8[i];
	if (n > CK_ST_MAX_HEADER)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: header length %llu exceeds the limit of %llu bytes", what,
			       (unsigned long long)n, CK_ST_MAX_HEADER);
	if (n > file_size - 8)
		return ck_fail(err, CK_E_SOURCE,
			       "%s: header length %llu runs past the end of the %llu-byte file",
			       what, (unsigned long long)n, (unsigned long long)file_size);
	*n_out = n;
	return 0;
}

int ck_st_parse_buffer(const unsigned char *buf, size_t len, const char *what,
		       struct ck_file_tensors *out, struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	uint64_t n = 0;
	if (check_prefix(buf, len, what, &n, err) < 0)
		return -1;
	return parse_header_json((const char *)buf + 8, n, NULL, len - 8 - n, what, 1, out, err);
}

/* Headers from this size on are parsed as a helper thread reads them in
 * (stream_read.h): a 100,000-key one is 12.7 MB; a shard's is well under
 * 1 MB, and shards' headers are read on threads of their own already. */
#define STREAM_MIN_HEADER (4u << 20)

int ck_st_read_fd(int fd, uint64_t file_size, const char *what, struct ck_file_tensors *out,
		  struct ck_err *err)
{
	memset(out, 0, sizeof *out);
	unsigned char p8[8] = {0};
	uint64_t n = 0;
	int r = file_size >= 8 ? ck_pread_full(fd, p8, 8, 0) : 0;
	if (r < 0)
		return ck_fail_sys(err, -r, "%s: cannot read header length", what);
	if (check_prefix(p8, file_size, what, &n, err) < 0)
		return -1;
	char *json = malloc(n + 1);
	if (!json)
		return ck_fail_sys(err, ENOMEM, "%s", what);
	json[n] = '\0';
	int rd = 0;
	r = -1;
	if (n < STREAM_MIN_HEADER) {
		if ((rd = ck_pread_full(fd, json, n, 8)) == 0)
			r = parse_header_json(json, n, NULL, file_size - 8 - n, what, 0, out, err);
	} else {
		struct ck_stream_read in;
		ck_stream_read_start(&in, fd, json, n, 8);
		r = parse_header_json(json, n, &in, file_size - 8 - n, what, 0, out, err);
		rd = ck_stream_read_finish(&in);
		if (rd < 0 && r == 0)
			ck_file_tensors_free(out);
		else if (rd == 0 && r < 0) /* it may have run out of text: the whole text decides */
			r = parse_header_json(json, n, NULL, file_size - 8 - n, what, 0, out, err);
	}
	free(json);
	return rd < 0 ? ck_fail_sys(err, -rd, "%s: cannot read header", what) : r;
}
