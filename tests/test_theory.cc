// The convergence bound (theory/bound.h, docs/theory.md) against hand-computed values: its
// three terms, its condition, the step sizes it implies and the linear-speedup regime.
#include <cmath>

#include "catch.h"
#include "core/error.h"
#include "theory/bound.h"

using namespace rv;

namespace {

// Δ = 10, L = 2, sigma² = 4, N = 8, T = 3, C = 4, H = 5 (a = 2, κ = 4), eta = 0.01, K = 1000.
// Fields in BoundInputs' order: gap, smoothness, sigma2, batch, staleness, clusters, average_every,
// lr, updates.
BoundInputs four_clusters() { return BoundInputs{10, 2, 4, 8, 3, 4, 5, 0.01, 1000}; }

}  // namespace

TEST_CASE("the bound's terms and condition, by hand", "[theory]") {
  const Bound b = convergence_bound(four_clusters());
  CHECK(b.optimisation == Approx(2.0).epsilon(1e-12));  // 2 * 10 / (0.01 * 1000)
  CHECK(b.noise == Approx(0.0025).epsilon(1e-12));      // 2 * 0.01 * 4 / (4 * 8)
  CHECK(b.staleness + b.drift ==
        Approx(0.0068).epsilon(1e-12));  // 4 * 1e-4 * (2 * 9 + 4 * 4) * 4 / 8
  CHECK(b.value == Approx(2.0093).epsilon(1e-12));
  CHECK(b.condition == Approx(0.0528).epsilon(1e-12));  // 0.02 + 4e-4 * (18 + 4 * 16)
  CHECK(b.holds);

  // One cluster: a = 1, κ = 0 whatever H; here the condition fails.
  BoundInputs one{1, 1, 1, 1, 2, 1, 7, 0.5, 4};
  const Bound c = convergence_bound(one);
  CHECK(c.optimisation == Approx(1.0).epsilon(1e-12));
  CHECK(c.noise == Approx(0.5).epsilon(1e-12));
  CHECK(c.staleness + c.drift == Approx(1.0).epsilon(1e-12));  // 0.25 * (1 * 4) * 1 / 1
  CHECK(c.value == Approx(2.5).epsilon(1e-12));
  CHECK(c.condition == Approx(1.5).epsilon(1e-12));
  CHECK_FALSE(c.holds);
  one.average_every = 1;
  CHECK(convergence_bound(one).value == c.value);
}

TEST_CASE("Theorem 2: clusters whose objectives differ, by hand", "[theory]") {
  BoundInputs in = four_clusters();
  in.dissimilarity = 0.5;
  CHECK(convergence_bound(in).theorem == 1);  // same_objective: ζ² is not read
  CHECK(convergence_bound(in).dissimilarity == 0);
  in.same_objective = false;
  const Bound b = convergence_bound(in);
  CHECK(b.theorem == 2);
  // L eta = 0.02, L² eta² = 4e-4, a = 2, κ = 4: ρ = 2 * 4e-4 * (2 * 9 + 4 * 16) = 0.0656.
  const double rho = 0.0656;
  CHECK(b.optimisation == Approx(2.0).epsilon(1e-12));
  CHECK(b.noise == Approx(0.0025).epsilon(1e-12));
  CHECK(b.staleness == Approx(4e-4 * 18 * 4 / 8 / (1 - rho)).epsilon(1e-12));
  CHECK(b.drift == Approx(4e-4 * 16 * 4 / 8 / (1 - rho)).epsilon(1e-12));
  CHECK(b.dissimilarity == Approx(4e-4 * (2 * 2 * 9 + 8 * 16) * 0.5 / (1 - rho)).epsilon(1e-12));
  CHECK(b.value == Approx(2.0025 + 4e-4 * (9 + 8 + 82) / (1 - rho)).epsilon(1e-12));
  CHECK(b.condition == Approx(0.02 + 2 * 4e-4 * 9 / (1 - rho)).epsilon(1e-12));
  CHECK(b.holds);
  CHECK(b.paper_condition == Approx(2 * 0.01 * 2 * 9 / (4.0 * 8)).epsilon(1e-12));
  // With ζ² = 0 it is still looser than Theorem 1 (its proof averages, rather than cancels, the
  // clusters' gradients).
  in.dissimilarity = 0;
  CHECK(convergence_bound(in).value > convergence_bound(four_clusters()).value);
  // The largest step meets the condition with equality; past ρ = 1 there is no bound.
  const double top = largest_lr(in);
  in.lr = top;
  CHECK(convergence_bound(in).condition == Approx(1.0).epsilon(1e-9));
  CHECK(top < largest_lr(four_clusters()));
  in.lr = 0.2;  // ρ = 2 * 0.16 * 82 > 1
  CHECK(std::isinf(convergence_bound(in).condition));
  CHECK_FALSE(convergence_bound(in).holds);
  // One cluster: the two theorems are one.
  BoundInputs one{1, 1, 1, 1, 2, 1, 7, 0.1, 4};
  BoundInputs one2 = one;
  one2.same_objective = false;
  one2.dissimilarity = 3;
  CHECK(convergence_bound(one2).value == convergence_bound(one).value);
  CHECK(convergence_bound(one2).theorem == 1);
}

TEST_CASE("step sizes: the largest that meets the condition, the best for the bound", "[theory]") {
  BoundInputs one;
  one.smoothness = 1;
  one.staleness = 2;  // q = 4: x + 4 x² = 1
  const double x = largest_lr(one);
  CHECK(x == Approx(2.0 / (1.0 + std::sqrt(17.0))).epsilon(1e-12));
  CHECK(x + 4 * x * x == Approx(1.0).epsilon(1e-12));
  one.lr = x;
  CHECK(convergence_bound(one).condition == Approx(1.0).epsilon(1e-12));
  one.staleness = 0;  // no delay, one cluster: L eta <= 1
  CHECK(largest_lr(one) == Approx(1.0).epsilon(1e-12));

  BoundInputs in = four_clusters();
  // sqrt(2 * 10 * 4 * 8 / (2 * 4 * 1000)) = 0.2828 breaks the condition (q = 2 * 9 + 4 * 16 = 82):
  // the largest step that meets it, 2 / (1 + sqrt(329)) / 2.
  CHECK(best_lr(in) == Approx(1.0 / (1.0 + std::sqrt(329.0))).epsilon(1e-12));
  in.updates = 1000000;  // sqrt(640 / 8e6)
  const double eta = best_lr(in);
  CHECK(eta == Approx(std::sqrt(8e-5)).epsilon(1e-12));
  // The corollary: the first two terms become 2 sqrt(2 Δ L sigma² / (C N K)), the third
  // 2 L Δ C (a T² + 4 κ) / K.
  in.lr = eta;
  const Bound b = convergence_bound(in);
  CHECK(b.optimisation + b.noise ==
        Approx(2 * std::sqrt(2.0 * 10 * 2 * 4 / (4.0 * 8 * 1e6))).epsilon(1e-12));
  CHECK(b.staleness + b.drift == Approx(2.0 * 2 * 10 * 4 * 34 / 1e6).epsilon(1e-12));
  CHECK(b.holds);
}

TEST_CASE("the bound falls as 1/sqrt(C N K) at the best step, with linear speedup in C",
          "[theory]") {
  BoundInputs in = four_clusters();
  in.staleness = 1;
  in.updates = 100000000;
  auto at_best = [](BoundInputs x) {
    x.lr = best_lr(x);
    return convergence_bound(x);
  };
  // K x 4: the first two terms / 2 exactly; the delay term, O(1/K), falls faster.
  BoundInputs more = in;
  more.updates *= 4;
  const Bound b = at_best(in), b4 = at_best(more);
  CHECK((b4.optimisation + b4.noise) / (b.optimisation + b.noise) == Approx(0.5).epsilon(1e-9));
  CHECK((b4.staleness + b4.drift) / (b.staleness + b.drift) == Approx(1.0 / 4).epsilon(1e-9));
  // C x 2 with K / 2 per cluster: the same leading terms (linear speedup); inside the regime the
  // delay term, which grows as C² / K, stays below them, so the whole bound grows by less than 2.
  BoundInputs twice = in;
  twice.clusters *= 2;
  twice.updates /= 2;
  REQUIRE(linear_speedup_staleness(twice) >= twice.staleness);
  const Bound b2 = at_best(twice);
  CHECK(b2.optimisation + b2.noise == Approx(b.optimisation + b.noise).epsilon(1e-9));
  CHECK(b2.staleness + b2.drift <= b2.optimisation + b2.noise);
  CHECK(b2.value / b.value < 2);
  // Beyond the regime (T past linear_speedup_staleness) the delay term exceeds the other two.
  twice.staleness = linear_speedup_staleness(twice) + 1;
  const Bound beyond = at_best(twice);
  CHECK(beyond.staleness + beyond.drift > beyond.optimisation + beyond.noise);
}

TEST_CASE("the linear-speedup staleness, by hand", "[theory]") {
  BoundInputs in = four_clusters();
  in.updates = 100000000;
  // room = sqrt(2 * 4 * 1e8 / (2 * 10 * 64 * 8)) = 279.508; minus 4 κ = 16; T <= sqrt(263.508 / 2)
  CHECK(linear_speedup_staleness(in) == 11);
  in.updates = 1000;  // room 0.88 < 16: no staleness is inside
  CHECK(linear_speedup_staleness(in) == -1);
  in.clusters = 1;  // κ = 0, a = 1: room = sqrt(8e3 / (2 * 10 * 8)) = 7.07, T = 2
  CHECK(linear_speedup_staleness(in) == 2);
}

TEST_CASE("inputs out of range are refused, naming the input", "[theory]") {
  auto refused = [](void (*edit)(BoundInputs&), const char* says) {
    BoundInputs in = four_clusters();
    edit(in);
    CHECK_THROWS_WITH(convergence_bound(in), Catch::Contains(says));
  };
  refused([](BoundInputs& x) { x.smoothness = 0; }, "L must be > 0");
  refused([](BoundInputs& x) { x.lr = 0; }, "step size eta");
  refused([](BoundInputs& x) { x.lr = NAN; }, "step size eta");
  refused([](BoundInputs& x) { x.gap = -1; }, "F(w_0) - F*");
  refused([](BoundInputs& x) { x.sigma2 = -1; }, "sigma^2");
  refused([](BoundInputs& x) { x.dissimilarity = -1; }, "zeta^2");
  refused([](BoundInputs& x) { x.batch = 0; }, "micro-batch N");
  refused([](BoundInputs& x) { x.staleness = -1; }, "staleness T");
  refused([](BoundInputs& x) { x.clusters = 0; }, "clusters C");
  refused([](BoundInputs& x) { x.average_every = 0; }, "H, the updates");
  refused([](BoundInputs& x) { x.updates = 0; }, "updates K");
  BoundInputs no_lr = four_clusters();
  no_lr.lr = 0;
  CHECK_NOTHROW(best_lr(no_lr));  // the step is what it computes
  CHECK_THROWS_AS(convergence_bound(no_lr), InputError);
}
