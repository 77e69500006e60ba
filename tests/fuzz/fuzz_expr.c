/* Fuzz target: the expression parser and evaluator on their own, with a
 * tensor, an integer and a list in scope (deep nesting and long operator,
 * method and index chains are in the seed corpus). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "map/expr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int lookup(void *ctx, const char *name, struct ck_xval *out, struct ck_err *err)
{
	(void)ctx;
	memset(out, 0, sizeof *out);
	static const int64_t x_shape[] = {6, 4, 2}, s_shape[] = {2, 1, 1};
	if (!strcmp(name, "x") || !strcmp(name, "s")) {
		out->kind = XV_TENSOR;
		int s = name[0] == 's';
		return ck_value_leaf(&out->t, (uint32_t)s, CK_DT_F32, 3, s ? s_shape : x_shape, err);
	}
	if (!strcmp(name, "n")) {
		out->kind = XV_INT;
		out->i = 3;
		return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct ck_err err;
	struct ck_expr *e = ck_expr_parse(text, &err);
	if (e) {
		struct ck_xval v;
		if (ck_expr_eval(e, lookup, NULL, &v, &err) == 0)
			ck_xval_free(&v);
		ck_expr_free(e);
	}
	free(text);
	return 0;
}
