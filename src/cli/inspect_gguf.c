/* inspect --format gguf[:TYPE]: the GGUF view's metadata and tensors
 * (names, types, shapes, offsets), from shapes alone: no tensor data read. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ckpt/ggml_types.h"
#include "../util/jsonw.h"
#include "../view/gguf_view.h"
#include "cli.h"

static uint64_t get(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int k = n - 1; k >= 0; k--)
		v = v << 8 | p[k];
	return v;
}

static const char *type_name(uint32_t t)
{
	return t == CK_GGUF_BF16 ? "BF16" : ck_ggml_type_name(t);
}

static const int SIZE[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* Step over one value of type t at *p (the view's own encoding: trusted). */
static void skip_value(const unsigned char **p, uint32_t t)
{
	*p += t == 8 ? 8 + get(*p, 8) : (uint64_t)SIZE[t];
}

/* One value of type t at *p (advanced), as JSON or as text. */
static void put_value(const unsigned char **p, uint32_t t, int json)
{
	const int *size = SIZE;
	if (t == 8) {
		uint64_t n = get(*p, 8);
		char *s = strndup((const char *)*p + 8, (size_t)n);
		if (json)
			ck_json_fput_str(stdout, s ? s : "");
		else
			ck_fput_safe(stdout, s ? s : "");
		free(s);
		*p += 8 + n;
		return;
	}
	uint64_t v = get(*p, size[t]);
	*p += size[t];
	if (t == 6) {
		float f;
		uint32_t b = (uint32_t)v;
		memcpy(&f, &b, 4);
		printf("%.9g", (double)f);
	} else if (t == 7) {
		printf("%s", v ? "true" : "false");
	} else if (t == 5) {
		printf("%" PRId32, (int32_t)v);
	} else {
		printf("%" PRIu64, v);
	}
}

static void print_meta(const struct ck_gguf_meta *m, int json)
{
	const unsigned char *p = m->b.p;
	for (uint64_t k = 0; k < m->n; k++) {
		uint64_t n = get(p, 8);
		char key[256];
		snprintf(key, sizeof key, "%.*s", (int)n, (const char *)p + 8);
		p += 8 + n;
		uint32_t t = (uint32_t)get(p, 4);
		p += 4;
		if (json) {
			printf("%s\n    ", k ? "," : "");
			ck_json_fput_str(stdout, key);
			printf(": ");
		} else {
			printf("  %-44s ", key);
		}
		if (t != 9) {
			put_value(&p, t, json);
		} else { /* arrays: their size, and the first few values in text */
			uint32_t et = (uint32_t)get(p, 4);
			uint64_t cnt = get(p + 4, 8);
			p += 12;
			printf(json ? "{\"count\": %" PRIu64 ", \"values\": [" : "[%" PRIu64 "]", cnt);
			for (uint64_t i = 0; i < cnt; i++) {
				if (json || i < 4) {
					fputs(i ? ", " : json ? "" : " ", stdout);
					put_value(&p, et, json);
				} else {
					skip_value(&p, et);
				}
			}
			fputs(json ? "]}" : cnt > 4 ? ", ..." : "", stdout);
		}
		if (!json)
			printf("\n");
	}
}

/* gguf-split's pieces, when asked for: name, bytes, tensors (the count
 * the header holds, at 8: the first literal of each file). */
static void print_split(const struct ck_gguf_view *g, int json)
{
	if (!g->n_split)
		return;
	if (json)
		printf("  \"split\": [");
	else
		printf("split as gguf-split does, into %zu files (the offsets below are "
		       "model.gguf's):\n",
		       g->n_split);
	for (size_t k = 0; k < g->n_split; k++) {
		uint64_t n = 0;
		for (int b = 7; b >= 0 && g->split[k].blob_len >= 16; b--)
			n = n << 8 | g->split[k].blob[8 + b];
		if (json)
			printf("%s{\"file\": \"%s\", \"bytes\": %" PRIu64 ", \"tensors\": %" PRIu64
			       "}",
			       k ? ", " : "", g->names[k], g->split[k].size, n);
		else
			printf("  %s: %" PRIu64 " bytes, %" PRIu64 " tensors\n", g->names[k],
			       g->split[k].size, n);
	}
	if (json)
		printf("],\n");
}

int ck_inspect_gguf(const struct ck_view *v, const struct ck_gguf_opts *o, int json,
		    struct ck_err *err)
{
	struct ck_gguf_view g;
	if (ck_gguf_view_open(v->cat, v->maps, v->n_maps, o, &g, err) < 0)
		return -1;
	if (json) {
		printf("{\"file\": \"model.gguf\", \"bytes\": %" PRIu64 ", \"architecture\": \"%s\", "
		       "\"type\": \"%s\", \"vocabulary_from\": \"%s\",\n  \"metadata\": {",
		       g.file.size, g.arch, g.type, g.vocab.from);
		print_meta(&g.meta, 1);
		printf("},\n");
		print_split(&g, 1);
		printf("  \"tensors\": [");
	} else {
		printf("model.gguf: %" PRIu64
		       " bytes, GGUF v3, architecture %s, type %s, %zu tensors, "
		       "vocabulary %s (%zu tokens from %s)\n",
		       g.file.size, g.arch, g.type, g.plan->n + g.n_extra, g.vocab.model, g.vocab.n,
		       g.vocab.from);
		print_split(&g, 0);
		if (o->imatrix)
			printf("importance matrix %s: %zu entries, weighing %zu tensors (*)\n",
			       o->imatrix, g.imx.n, g.imx_used);
		print_meta(&g.meta, 0);
		printf("%-40s %-5s %-24s %12s %12s\n", "NAME", "TYPE", "SHAPE", "BYTES", "OFFSET");
	}
	for (size_t i = 0, k = 0; i < g.plan->n; i++) {
		const struct ck_target *t = &g.plan->t[i];
		while (k < g.file.n && g.file.parts[k].target != i)
			k++;
		uint64_t off = k < g.file.n ? g.file.parts[k].off : 0;
		char shape[160] = "[";
		for (int d = 0; d < t->v.ndim; d++)
			snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRId64,
				 d ? ", " : "", t->v.shape[d]);
		strcat(shape, "]");
		if (json) {
			printf("%s\n    {\"name\": ", i ? "," : "");
			ck_json_fput_str(stdout, t->name);
			printf(", \"type\": \"%s\", \"shape\": %s, \"bytes\": %" PRIu64
			       ", \"offset\": %" PRIu64 "%s}",
			       type_name((uint32_t)ck_gguf_type_of(t)), shape, t->nbytes, off,
			       !o->imatrix ? ""
			       : t->qw	   ? ", \"imatrix\": true"
					   : ", \"imatrix\": false");
		} else {
			printf("%-40s %-5s %-24s %12" PRIu64 " %12" PRIu64 "%s\n", t->name,
			       type_name((uint32_t)ck_gguf_type_of(t)), shape, t->nbytes, off,
			       t->qw ? " *" : "");
		}
	}
	for (size_t k = 0; k < g.n_extra; k++) { /* computed from config.json: F32, 1-D */
		const struct ck_gguf_extra *x = &g.extra[k];
		if (json)
			printf("%s\n    {\"name\": \"%s\", \"type\": \"F32\", \"shape\": [%" PRId64
			       "], \"bytes\": %" PRId64 ", \"offset\": %" PRIu64 "}",
			       g.plan->n + k ? "," : "", x->name, x->n, x->n * 4, x->offset);
		else {
			char shape[32];
			snprintf(shape, sizeof shape, "[%" PRId64 "]", x->n);
			printf("%-40s %-5s %-24s %12" PRId64 " %12" PRIu64 "\n", x->name, "F32",
			       shape, x->n * 4, x->offset);
		}
	}
	if (json)
		printf("\n  ]}\n");
	ck_gguf_view_free(&g);
	return 0;
}
