/* Values of a source that are not tensors and are left out of the catalog
 * (epoch counters, hyper-parameters, byte items, and callables such as
 * os.system that a hostile pickle names: never called, only reported).
 * The first CK_LEFTOUT_KEEP are kept with what they are; all are counted. */
#ifndef CK_LEFTOUT_H
#define CK_LEFTOUT_H

#include <stddef.h>

#define CK_LEFTOUT_KEEP 10000

struct ck_leftout_entry {
	char *key;  /* dotted key, as a tensor there would be named */
	char *what; /* "int", "call of os.system", "bytes item", ... */
};

struct ck_leftout {
	struct ck_leftout_entry *e;
	size_t n, cap;
	size_t total;
};

/* Count one value; keep it while there is room. -1 on ENOMEM. */
int ck_leftout_add(struct ck_leftout *lo, const char *key, const char *what);
void ck_leftout_free(struct ck_leftout *lo);

#endif
