#include "ggml_types.h"

int ck_ggml_block(uint32_t type, size_t *elems, size_t *bytes)
{
	switch (type) {
	case CK_GGML_Q4_0: *elems = 32, *bytes = 18; return 1;	 /* d, qs[16] */
	case CK_GGML_Q4_1: *elems = 32, *bytes = 20; return 1;	 /* d, m, qs[16] */
	case CK_GGML_Q5_0: *elems = 32, *bytes = 22; return 1;	 /* d, qh[4], qs[16] */
	case CK_GGML_Q5_1: *elems = 32, *bytes = 24; return 1;	 /* d, m, qh[4], qs[16] */
	case CK_GGML_Q8_0: *elems = 32, *bytes = 34; return 1;	 /* d, qs[32] */
	case CK_GGML_IQ4_NL: *elems = 32, *bytes = 18; return 1; /* d, qs[16] */
	case CK_GGML_Q2_K: *elems = 256, *bytes = 84; return 1;	 /* scales[16], qs[64], d, dmin */
	case CK_GGML_Q3_K:
		*elems = 256, *bytes = 110;
		return 1; /* hmask[32], qs[64], scales[12], d */
	case CK_GGML_Q4_K: *elems = 256, *bytes = 144; return 1; /* d, dmin, scales[12], qs[128] */
	case CK_GGML_Q5_K: *elems = 256, *bytes = 176; return 1; /* Q4_K with qh[32] before qs */
	case CK_GGML_Q6_K:
		*elems = 256, *bytes = 210;
		return 1; /* ql[128], qh[64], scales[16], d */
	case CK_GGML_IQ4_XS:
		*elems = 256, *bytes = 136;
		return 1; /* d, scales_h, scales_l[4], qs[128] */
	case CK_GGML_TQ1_0: *elems = 256, *bytes = 54; return 1; /* qs[48], qh[4], d */
	case CK_GGML_TQ2_0: *elems = 256, *bytes = 66; return 1; /* qs[64], d */
	case CK_GGML_MXFP4:
		*elems = 32, *bytes = 17;
		return 1; /* an E8M0 exponent, 16 bytes of E2M1 pairs */
	default: return 0;
	}
}

const char *ck_ggml_type_name(uint32_t t)
{
	static const char *const n[] = {"F32",	   "F16",    "Q4_0",	"Q4_1",	   "(4)",    "(5)",
					"Q5_0",	   "Q5_1",   "Q8_0",	"Q8_1",	   "Q2_K",   "Q3_K",
					"Q4_K",	   "Q5_K",   "Q6_K",	"Q8_K",	   "IQ2_XXS", "IQ2_XS",
					"IQ3_XXS", "IQ1_S",  "IQ4_NL",	"IQ3_S",   "IQ2_S",  "IQ4_XS",
					"I8",	   "I16",    "I32",	"I64",	   "F64",    "IQ1_M",
					"BF16",	   "(31)",   "(32)",	"(33)",	   "TQ1_0",  "TQ2_0",
					"(36)",	   "(37)",   "(38)",	"MXFP4"};
	return t < sizeof n / sizeof *n ? n[t] : "unknown";
}

