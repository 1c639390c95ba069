// Models: the analytic profile matches the instantiated module, and stages compose to the model.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "catch.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/scenario/scenario.h"

using namespace rv;

namespace {

ModelDesc cnn() {
  ModelSpec s;
  s.kind = ModelKind::kCnn;
  s.channels = {4, 8};
  s.hidden = {16};
  s.dropout = 0.25;
  s.head = Head::kLinear;
  return build_model(s, {1, 8, 8}, 10);
}

ModelDesc mlp() {
  ModelSpec s;
  s.kind = ModelKind::kMlp;
  s.hidden = {32, 16};
  s.head = Head::kLinear;
  return build_model(s, {1, 28, 28}, 10);
}

}  // namespace

TEST_CASE("profile matches the instantiated module", "[model]") {
  for (const ModelDesc& m : {cnn(), mlp()}) {
    INFO(m.name);
    at::Tensor x = at::randn({3, m.input_shape[0], m.input_shape[1], m.input_shape[2]});
    for (int i = 0; i < m.layer_count(); ++i) {
      StageModule layer(m, i, i + 1, 1);
      int64_t numel = 0;
      std::vector<int64_t> elems;  // tensor by tensor, as the optimizer's kernels run
      for (const auto& p : layer.params()) {
        numel += p.numel();
        elems.push_back(p.numel());
      }
      INFO("layer " << i << " " << m.profile[i].name);
      CHECK(numel == m.profile[i].params);
      CHECK(elems == m.profile[i].param_elems);
      int64_t buffers = 0;
      for (const auto& b : layer.buffers()) buffers += b.numel();
      CHECK(buffers == m.profile[i].buffers);
      c10::NoGradGuard ng;
      x = layer.forward(x, layer.params(), false, 0, false);
      std::vector<int64_t> shape(x.sizes().begin() + 1, x.sizes().end());
      CHECK(shape == m.profile[i].out_shape);
    }
    CHECK(x.size(1) == 10);
  }
}

TEST_CASE("flops of a linear layer are 2 * in * out per sample", "[model]") {
  ModelDesc m = mlp();
  REQUIRE(m.profile[1].name.rfind("linear(784->32)", 0) == 0);
  CHECK(m.profile[1].forward_flops == 2.0 * 784 * 32);
  CHECK(m.params(0, m.layer_count()) == 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10);
  CHECK(m.total_params() == m.params(0, 3) + m.params(3, m.layer_count()));
}

TEST_CASE("stages compose to the whole model, with the same initial weights however cut",
          "[model]") {
  ModelDesc m = cnn();
  at::Tensor x = at::randn({5, 1, 8, 8});
  StageModule whole(m, 0, m.layer_count(), 42);
  c10::NoGradGuard ng;
  at::Tensor y = whole.forward(x, whole.params(), true, 9, false);
  for (int cut = 1; cut < m.layer_count(); ++cut) {
    StageModule a(m, 0, cut, 42), b(m, cut, m.layer_count(), 42);
    at::Tensor z = b.forward(a.forward(x, a.params(), true, 9, false), b.params(), true, 9, false);
    INFO("cut at " << cut);
    CHECK(at::allclose(y, z, 1e-5, 1e-6));
  }
}

TEST_CASE("dropout masks are fixed by their seed, so a forward can be recomputed", "[model]") {
  ModelDesc m = cnn();
  StageModule s(m, 0, m.layer_count(), 3);
  at::Tensor x = at::randn({4, 1, 8, 8});
  c10::NoGradGuard ng;
  at::Tensor a = s.forward(x, s.params(), true, 77, false);
  at::Tensor b = s.forward(x, s.params(), true, 77, false);
  at::Tensor c = s.forward(x, s.params(), true, 78, false);
  CHECK(at::equal(a, b));
  CHECK_FALSE(at::equal(a, c));
}

TEST_CASE("a model has only the layers its scenario asks for", "[model]") {
  ModelSpec s;
  s.kind = ModelKind::kMlp;
  s.hidden = {32, 10};
  SECTION("no head: the last hidden layer gives the task's outputs, no flatten on flat inputs") {
    ModelDesc m = build_model(s, {64}, 10);
    REQUIRE(m.layer_count() == 4);  // linear, relu, linear, relu
    CHECK(m.profile[0].name.rfind("linear(64->32)", 0) == 0);
    CHECK(m.profile[3].name.rfind("relu", 0) == 0);
    CHECK(m.outputs == 10);
  }
  SECTION("images get a flatten before the first linear layer, and a head only when asked") {
    ModelDesc m = build_model(s, {1, 8, 8}, 10);
    CHECK(m.profile[0].name.rfind("flatten", 0) == 0);
    CHECK(m.layer_count() == 5);
    s.head = Head::kLinear;
    ModelDesc h = build_model(s, {1, 8, 8}, 10);
    REQUIRE(h.layer_count() == 6);
    CHECK(h.profile[5].name.rfind("linear(10->10)", 0) == 0);
  }
  SECTION("a model that does not end in the task's outputs is refused, naming model.head") {
    s.hidden = {32};
    try {
      build_model(s, {1, 8, 8}, 10);
      FAIL("no error");
    } catch (const InputError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Matchers::Contains("model.head") && Catch::Matchers::Contains("32") &&
                           Catch::Matchers::Contains("10 outputs"));
    }
  }
  SECTION("a regression head has the task's targets as outputs") {
    s.hidden = {16};
    s.head = Head::kLinear;
    ModelDesc m = build_model(s, {8}, 3);
    CHECK(m.profile.back().out_shape == std::vector<int64_t>{3});
    CHECK(m.params(0, m.layer_count()) == 8 * 16 + 16 + 16 * 3 + 3);
  }
}
