/* test_speculative_ngram.c — the n-gram lookup's proposals (spec_ngram): the occurrence that matches furthest back
 * wins over a later, shorter one, the latest of equal ones is taken, nothing is proposed without an earlier
 * occurrence, and a repeating stretch is drafted for all of k_max, the copy going on through its own proposals. */
#include "generate/speculative.h"
#include "testutil.h"

static int propose(const hearth_token *toks, int n, int k_max, hearth_token *out) {
    spec_params p = spec_default_params();   /* n-grams of 2 .. 4 tokens */
    return spec_ngram(&p, toks, n, k_max, out);
}

int main(void) {
    hearth_token out[SPEC_MAX_DRAFT];

    const hearth_token longest[] = { 1, 2, 3, 4, 9, 0, 3, 4, 7, 1, 2, 3, 4 };   /* "1 2 3 4" before 9, "0 3 4" before 7 */
    int k = propose(longest, 13, 1, out);
    CHECK(k == 1 && out[0] == 9, "longest match: %d tokens, first %d (expected 9)", k, k ? out[0] : -1);

    const hearth_token latest[] = { 5, 6, 7, 5, 6, 8, 9, 5, 6 };   /* "5 6" twice, each matching two tokens back */
    k = propose(latest, 9, 2, out);
    CHECK(k == 2 && out[0] == 8 && out[1] == 9, "latest of equals: %d tokens, %d %d (expected 8 9)", k, out[0], out[1]);

    const hearth_token none[] = { 1, 2, 3, 4, 5, 1 };   /* "5 1" never occurred before */
    CHECK(propose(none, 6, 4, out) == 0, "no earlier occurrence: proposals made");
    CHECK(propose(none, 2, 4, out) == 0, "a history no longer than the n-gram: proposals made");

    const hearth_token loop[] = { 1, 2, 3, 1, 2, 3, 1, 2 };   /* the loop goes on: 3 1 2 3 1 2 3 1 */
    k = propose(loop, 8, 8, out);
    CHECK(k == 8, "a repeating stretch: %d proposals (expected 8)", k);
    for (int i = 0; i < k; i++) CHECK(out[i] == loop[(i + 2) % 3], "a repeating stretch: proposal %d is %d", i, out[i]);
    TEST_DONE();
}
