/* Optimizer state follows its parameters. A source may hold, beside the
 * parameters, per-parameter optimizer tensors in one of two conventions:
 *   - torch.distributed.checkpoint.state_dict's flattened form
 *     (flatten_optimizer_state_dict): state.{fqn}.{state}, and nested under
 *     "optimizer" as torchtitan saves it: optimizer.state.{fqn}.{state};
 *   - Megatron-core torch_dist: optimizer.state.{state}.{param key}, state
 *     one of exp_avg, exp_avg_sq, fp32_param, step, momentum_buffer,
 *     max_exp_avg_sq.
 * The planner takes them out before the rules run, plans the parameters,
 * then runs the same rules once per state name over {param name -> state
 * tensor}, so each state tensor gets exactly its parameter's layout. Scalars
 * (step) follow their parameter's rename and are never split. */
#ifndef CK_OPTSTATE_H
#define CK_OPTSTATE_H

#include "plan_int.h"

enum ck_opt_form { CK_OPTF_NONE, CK_OPTF_FLAT, CK_OPTF_NESTED, CK_OPTF_MEGATRON };

struct ck_opt_key {
	enum ck_opt_form form;
	const char *param, *state; /* spans of the key */
	size_t param_len, state_len;
};

/* 1: key is per-parameter optimizer state (k filled), 0: it is not, -1:
 * refused (a Megatron distributed-optimizer bucket; message in err). */
int ck_opt_classify(const char *key, struct ck_opt_key *k, struct ck_err *err);
/* The key a state of param is named by under tmpl ({param}, {state}). */
char *ck_opt_name(const char *tmpl, const char *param, const char *state);
/* The template a form's keys follow. */
const char *ck_opt_form_template(enum ck_opt_form f);

struct ck_opt_split;
/* Before the rules: move the optimizer state keys out of keys (every source
 * key, leaf set, in catalog order). *out is NULL when the mappings turn
 * recognition off ("optimizer_state": "none") or the source has no state;
 * with "drop" the state keys are removed and nothing follows. */
int ck_opt_take(const struct ck_catalog *cat, struct ck_mapping *const *maps, int n_maps,
		struct skey **keys, size_t *n, struct ck_opt_split **out, struct ck_err *err);
/* After the rules: keys[0..n) are the parameter targets; append the state
 * targets that follow them. *tmpl: the naming template (malloc'd). */
int ck_opt_plan(struct ck_opt_split *os, const struct ck_catalog *cat,
		struct ck_mapping *const *maps, int n_maps, struct skey **keys, size_t *n,
		char **tmpl, struct ck_err *err);
void ck_opt_free(struct ck_opt_split *os);

#endif

/* A per-group hyper-parameter the source holds as a Python value, not a
 * tensor (param_groups.{fqn}.lr in a torch.save file): left out of the
 * catalog, listed with the name it takes beside each target whose first
 * source is fqn. */
struct ck_hparam {
	const char *from, *what; /* the left-out key and what it is ("float") */
	char *to;		 /* param_groups.{target}.{name} */
};
int ck_opt_hparams(const struct ck_plan *p, struct ck_hparam **out, size_t *n,
		   struct ck_err *err);
void ck_opt_hparams_free(struct ck_hparam *h, size_t n);
