/* Internals of the planner shared by plan.c (the rule engine), targets.c
 * (the plan container) and optstate.c (optimizer state planned through the
 * same rules). */
#ifndef CK_PLAN_INT_H
#define CK_PLAN_INT_H

#include "plan.h"

/* A key alive during one stage. */
struct skey {
	char *name;
	struct ck_value v;
	int consumed_by; /* rule index that consumed it, 0 if none */
	int produced_by; /* rule index, 0 for the stage's inputs */
	/* source key leaf - 1, its value not built yet (v empty): a source key
	 * holds no pieces until a rule reads it or it becomes a target, so a
	 * 100k-key plan does not hold every leaf and its copy at once */
	uint32_t leaf;
	/* name is the catalog's own string (a source key as it is), not
	 * freed with the key: 100k names are not copied to be thrown away */
	uint8_t borrowed;
	/* a final target that is optimizer state: the parameter target it
	 * follows and the state's name ("exp_avg"); scalar: a per-parameter
	 * scalar ("step"), replicated on per-rank views (a byte, beside
	 * borrowed: 128 bytes a key, not 136) */
	uint8_t scalar;
	char *param, *state;
};

struct ck_warnings {
	char **w;
	size_t n;
};

void ck_plan_keys_free(struct skey *k, size_t n);
/* Run one mapping over keys (they move into the stage; the stage's outputs
 * come back in their place). first: the first mapping of the chain (unused
 * keys are an error by default); lenient: a rule that matches nothing is
 * not an error (optimizer state exists for some parameters only). */
int ck_plan_run_stage(const struct ck_mapping *m, int first, int lenient,
		      const struct ck_catalog *cat, struct skey **keys, size_t *n_keys,
		      struct ck_warnings *warn, struct ck_err *err);
/* A stage finds a rule's keys through their shapes (numbers made "0")
 * when its mapping has this many rules whose first input's pattern decides
 * by shape: a key's shape costs about ten times what a pattern costs to
 * refuse the key by the text it ends with, and is made once for all rules.
 * With fewer, the candidates are the keys that end with that text. */
#define CK_SHAPE_RULES_MIN 10
/* The same, a rule's instances on `threads` threads (ck_plan_build_threads) */
int ck_plan_run_stage_threads(const struct ck_mapping *m, int first, int lenient, int threads,
			      const struct ck_catalog *cat, const cJSON *config, struct skey **keys,
			      size_t *n_keys, struct ck_warnings *warn, struct ck_err *err);
/* Source key i (a tensor, or a DCP tensor made of chunks) as a value. */
int ck_plan_source_value(const struct ck_catalog *cat, uint32_t i, struct ck_value *v,
			 struct ck_err *err);

void ck_warnings_free(struct ck_warnings *w);
/* A built plan's last step: targets in natural name order, sizes, the name
 * map and the dependency groups. */
int ck_plan_finish(struct ck_plan *p, struct ck_err *err);

#endif
