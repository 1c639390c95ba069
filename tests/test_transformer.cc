// The transformer model kind (issue 19): exact parameter counts against published ones, the
// profile's flops and attention's quadratic activations, causality, a model cut into stages
// computing what the whole model computes, the next-token task, the sort and text data, and a
// small GPT learning to sort across two clusters of two stages in simulation.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "catch.h"
#include "core/data/dataset.h"
#include "core/data/task.h"
#include "core/data/tokens.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/output/run_output.h"
#include "sim/sim_runner.h"
#include "test_support.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

ModelSpec gpt(int64_t layers, int64_t d_model, int64_t heads, int64_t d_ff = 0) {
  ModelSpec m;
  m.kind = ModelKind::kTransformer;
  m.layers = layers;
  m.d_model = d_model;
  m.heads = heads;
  m.d_ff = d_ff;
  return m;
}

int64_t numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("a transformer's parameter count is GPT-2's, its head untied", "[transformer][model]") {
  // GPT-2 small: 12 blocks of 768, 12 heads, 50,257 tokens, 1,024 positions: 124,439,808
  // parameters with the head tied to the token embedding (as published); this model's head has
  // its own 50,257 x 768 weights.
  ModelSpec m = gpt(12, 768, 12);
  m.seq_len = 1024;
  const ModelDesc d = build_model(m, {1024}, 50257);
  CHECK(d.total_params() == 124439808 + 50257 * 768);
  CHECK(d.layer_count() == 14);  // the embeddings, 12 blocks, the head
  // GPT-3 XL's shape (24 x 2048, d_ff 8192): 1.3 billion parameters with a 32,000-token vocabulary.
  ModelSpec xl = gpt(24, 2048, 16, 8192);
  const ModelDesc x = build_model(xl, {1024}, 32000);
  CHECK(x.total_params() ==
        1024 * 2048 + 32000 * 2048 + 24 * (12 * 2048 * 2048 + 13 * 2048) + 2 * 2048 + 2048 * 32000);
  CHECK(x.total_params() > 1'300'000'000);
  CHECK(x.total_params() < 1'400'000'000);
}

TEST_CASE("a transformer stage holds the parameters its profile counts", "[transformer][model]") {
  ModelSpec m = gpt(3, 32, 4, 80);
  m.dropout = 0.1;
  const ModelDesc d = build_model(m, {10}, 7);
  for (int l = 0; l < d.layer_count(); ++l) {
    StageModule s(d, l, l + 1, 5);
    INFO(d.profile[static_cast<size_t>(l)].name);
    CHECK(numel(s.params()) == d.profile[static_cast<size_t>(l)].params);
    const std::vector<int64_t>& elems = d.profile[static_cast<size_t>(l)].param_elems;
    REQUIRE(s.params().size() == elems.size());
    for (size_t i = 0; i < elems.size(); ++i) CHECK(s.params()[i].numel() == elems[i]);
  }
  StageModule whole(d, 0, d.layer_count(), 5);
  const at::Tensor y =
      whole.forward(at::randint(7, {4, 10}, at::kLong), whole.params(), false, 0, false);
  CHECK(y.sizes() == at::IntArrayRef({4, 10, 7}));
  CHECK(d.outputs == 10 * 7);
}

TEST_CASE(
    "a block's flops are its matmuls and attention's products, its activations quadratic in the "
    "tokens",
    "[transformer][model]") {
  const int64_t D = 64, H = 4, F = 256;
  auto block = [&](int64_t t) { return build_model(gpt(1, D, H, F), {t}, 11).profile[1]; };
  for (int64_t t : {8, 32, 128}) {
    const LayerProfile p = block(t);
    Flops matmul = 0;
    for (const LayerOp& op : p.ops)
      if (op.kind == OpKind::kMatmul) matmul += op.flops;
    // Two flops per multiply-add: QKV, the projection, the MLP; QK^T and AV over all T x T pairs.
    CHECK(matmul == Approx(2.0 * t * (4 * D * D + 2 * D * F) + 4.0 * t * t * D));
    CHECK(p.forward_flops > matmul);  // norms, softmax, GELU and the residual adds on top
  }
  // Saved activations: linear in the tokens but for attention's H x T x T probabilities.
  const int64_t s1 = block(64).saved_elems, s2 = block(128).saved_elems;
  CHECK(s2 - 2 * s1 == 2 * H * 64 * 64);
  // Dropout keeps its masks and, for AV, the dropped probabilities beside the softmax's output.
  ModelSpec dropped = gpt(1, D, H, F);
  dropped.dropout = 0.1;
  CHECK(build_model(dropped, {64}, 11).profile[1].saved_elems - s1 == 2 * H * 64 * 64 + 2 * 64 * D);
  // Sizes whose saved floats would pass 2^40 are refused, not overflowed.
  ModelSpec huge = gpt(1, 64, 1 << 16);
  huge.d_model = 1 << 16;
  CHECK_THROWS_AS(build_model(huge, {1 << 16}, 11), InputError);
  // The model's work lists every kernel group, forward and backward (matmuls twice: weights and
  // input).
  const ModelDesc d = build_model(gpt(2, D, H, F), {16}, 11);
  const Work fw = d.forward_work(1, 2, 8), bw = d.backward_work(1, 2, 8);
  double fw_mm = 0, bw_mm = 0;
  for (int c = 0; c < kOpClasses; ++c) {
    fw_mm += fw.ops(OpKind::kMatmul, Pass::kForward, c);
    bw_mm += bw.ops(OpKind::kMatmul, Pass::kBackward, c);
  }
  CHECK(fw_mm == 6);
  CHECK(bw_mm == 12);
  CHECK(fw.total_flops() == Approx(8 * d.forward_flops(1, 2)));
}

TEST_CASE("a transformer's outputs at a position do not depend on later tokens",
          "[transformer][model]") {
  const ModelDesc d = build_model(gpt(2, 32, 4), {12}, 9);
  StageModule s(d, 0, d.layer_count(), 11);
  at::Tensor a = at::randint(9, {2, 12}, at::kLong);
  at::Tensor b = a.clone();
  b.narrow(1, 7, 5).random_(0, 9);
  b[0][7] = (a[0][7].item<int64_t>() + 1) % 9;  // position 7 surely differs
  const at::Tensor ya = s.forward(a, s.params(), false, 0, false),
                   yb = s.forward(b, s.params(), false, 0, false);
  CHECK(at::allclose(ya.narrow(1, 0, 7), yb.narrow(1, 0, 7), 1e-5, 1e-6));
  CHECK_FALSE(at::allclose(ya.narrow(1, 7, 1), yb.narrow(1, 7, 1), 1e-5, 1e-6));
}

TEST_CASE("a transformer cut into stages computes what the whole model computes",
          "[transformer][model]") {
  ModelSpec m = gpt(3, 32, 2);
  m.dropout = 0.2;
  const ModelDesc d = build_model(m, {9}, 5);
  StageModule whole(d, 0, d.layer_count(), 21);
  StageModule first(d, 0, 2, 21), middle(d, 2, 4, 21), last(d, 4, d.layer_count(), 21);
  const at::Tensor x = at::randint(5, {3, 9}, at::kLong);
  // In training mode too: dropout masks depend on the seed and the layer's index, not the cut.
  for (bool train : {false, true}) {
    const at::Tensor y = whole.forward(x, whole.params(), train, 77, false);
    const at::Tensor h1 = first.forward(x, first.params(), train, 77, false);
    const at::Tensor h2 = middle.forward(h1, middle.params(), train, 77, false);
    const at::Tensor z = last.forward(h2, last.params(), train, 77, false);
    INFO("train " << train);
    CHECK(at::allclose(y, z, 1e-5, 1e-6));
  }
}

TEST_CASE("a transformer and token data go together, or the scenario is refused",
          "[transformer][model]") {
  const std::string base = "name = \"m\"\n[[devices]]\ncount = 2\n";
  CHECK_THROWS_AS(build_model(parse_scenario(
                      base, "m.toml", {"model.kind=\"transformer\"", "data.kind=\"digits\""})),
                  ScenarioError);
  CHECK_THROWS_AS(build_model(parse_scenario(
                      base, "m.toml", {"model.kind=\"transformer\"", "data.kind=\"regression\""})),
                  ScenarioError);
  CHECK_THROWS_AS(
      build_model(parse_scenario(base, "m.toml", {"model.kind=\"mlp\"", "data.kind=\"sort\""})),
      ScenarioError);
  CHECK(build_model(
            parse_scenario(base, "m.toml", {"model.kind=\"transformer\"", "data.kind=\"sort\""}))
            .input_vocab == 3);
}

TEST_CASE("a transformer needs token data and sizes that fit", "[transformer][model]") {
  CHECK_THROWS_AS(build_model(gpt(2, 32, 4), {1, 8, 8}, 10), InputError);
  CHECK_THROWS_AS(build_model(gpt(2, 30, 4), {8}, 10), InputError);  // 30 heads of 7.5
  ModelSpec m = gpt(2, 32, 4);
  m.seq_len = 4;
  CHECK_THROWS_AS(build_model(m, {8}, 10), InputError);  // 4 positions for 8 tokens
  m.seq_len = 0;
  m.vocab = 5;
  CHECK_THROWS_AS(build_model(m, {8}, 10), InputError);  // 5 ids for 10
  m.vocab = 16;                                          // more than the data's: fine
  CHECK(build_model(m, {8}, 10).outputs == 8 * 16);
}

TEST_CASE("the next-token task scores the positions that count, per sample",
          "[transformer][task]") {
  const Task& t = task_for(TaskKind::kNextToken);
  CHECK(t.has_accuracy());
  at::Tensor out = at::randn({2, 3, 4});
  at::Tensor y = at::tensor({-1L, 2L, 1L, 0L, 3L, -1L}).view({2, 3});
  // By hand: the mean over the four scored positions of -log softmax at the target.
  const at::Tensor lp = at::log_softmax(out, -1);
  const double l00 = 0, l01 = -lp[0][1][2].item<double>(), l02 = -lp[0][2][1].item<double>();
  const double l10 = -lp[1][0][0].item<double>(), l11 = -lp[1][1][3].item<double>();
  const LossResult r = t.loss_and_grad(out, y);
  CHECK(r.loss == Approx((l00 + l01 + l02 + l10 + l11) / 4).epsilon(1e-6));
  CHECK(r.grad_input.sizes() == out.sizes());
  CHECK(r.grad_input[0][0].abs().sum().item<double>() ==
        0.0);  // an ignored position gets no gradient
  const Score s = t.score(out, y);
  CHECK(s.loss_sum == Approx((l01 + l02) / 2 + (l10 + l11) / 2).epsilon(1e-6));
  // Accuracy: each sample's share of its scored positions predicted right.
  at::Tensor sure = at::full({2, 3, 4}, -10.0);
  sure[0][1][2] = 10;  // right
  sure[0][2][0] = 10;  // wrong (target 1)
  sure[1][0][0] = 10;  // right
  sure[1][1][3] = 10;  // right
  CHECK(t.score(sure, y).correct == Approx(0.5 + 1.0));
}

TEST_CASE("the sort data is minGPT's task, with no test sequence in the training set",
          "[transformer][data]") {
  DataSpec spec;
  spec.kind = DataKind::kSort;
  spec.length = 5;
  spec.digits = 4;
  spec.train_samples = 2000;
  spec.test_samples = 300;
  const DatasetShape shape = dataset_shape(spec);
  CHECK(shape.task == TaskKind::kNextToken);
  CHECK(shape.sample_shape == std::vector<int64_t>{9});
  CHECK(shape.outputs == 4);
  const Dataset d = load_dataset(spec, 3);
  REQUIRE(d.train_size() == 2000);
  REQUIRE(d.test_size() == 300);
  auto first_half = [](const at::Tensor& x, int64_t i) {
    std::vector<int64_t> v(5);
    for (int64_t k = 0; k < 5; ++k) v[static_cast<size_t>(k)] = x[i][k].item<int64_t>();
    return v;
  };
  std::set<std::vector<int64_t>> train_seqs;
  for (int64_t i = 0; i < d.train_size(); ++i) {
    std::vector<int64_t> v = first_half(d.train_x, i);
    train_seqs.insert(v);
    std::sort(v.begin(), v.end());
    for (int64_t k = 0; k < 4; ++k) {
      CHECK(d.train_x[i][5 + k].item<int64_t>() ==
            v[static_cast<size_t>(k)]);              // the sorted half, but its last
      CHECK(d.train_y[i][k].item<int64_t>() == -1);  // the unsorted half is not scored
    }
    for (int64_t k = 4; k < 9; ++k)
      CHECK(d.train_y[i][k].item<int64_t>() == v[static_cast<size_t>(k - 4)]);
    if (i == 20) break;  // the structure on a few; the split on all below
  }
  for (int64_t i = 0; i < d.train_size(); ++i) train_seqs.insert(first_half(d.train_x, i));
  for (int64_t i = 0; i < d.test_size(); ++i) CHECK(train_seqs.count(first_half(d.test_x, i)) == 0);
  // The same seed, the same data.
  CHECK(at::equal(load_dataset(spec, 3).train_x, d.train_x));
  // The fewest distinct sequences (one digit of two kinds) still split, and drawing ends.
  DataSpec tiny = spec;
  tiny.length = 1;
  tiny.digits = 2;
  tiny.train_samples = 10;
  tiny.test_samples = 10;
  const Dataset t = load_dataset(tiny, 1);
  CHECK(t.train_x[0][0].item<int64_t>() != t.test_x[0][0].item<int64_t>());
  CHECK(d.inputs({0, 1}, false).scalar_type() == at::kLong);
}

TEST_CASE("the text data is a file's characters as ids, train before test", "[transformer][data]") {
  const fs::path dir = fs::temp_directory_path() / "rv-text-test";
  fs::create_directories(dir);
  const fs::path file = dir / "t.txt";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "héllo wörld ";  // two-byte characters
  std::ofstream(file, std::ios::binary) << text;
  DataSpec spec;
  spec.kind = DataKind::kText;
  spec.path = file.string();
  spec.seq_len = 8;
  const DatasetShape shape = dataset_shape(spec);
  CHECK(shape.outputs == 9);  // ' ', 'd', 'h', 'l', 'o', 'r', 'w', 'é', 'ö'
  const TextCorpus c = read_text(file.string());
  CHECK(static_cast<int64_t>(c.symbols.size()) == shape.outputs);
  CHECK(c.ids.size() == 40 * 12);
  CHECK(std::is_sorted(c.symbols.begin(), c.symbols.end()));
  const Dataset d = load_dataset(spec, 1);
  const int64_t cut = static_cast<int64_t>(480 * 0.9);
  CHECK(d.train_size() == cut - 8);
  CHECK(d.test_size() == (480 - cut - 1) / 8);
  // Targets are the inputs shifted by one; ids map back to the text.
  const at::Tensor x = d.inputs({5}, false), y = d.targets({5}, false);
  for (int64_t k = 0; k < 7; ++k) CHECK(y[0][k].item<int64_t>() == x[0][k + 1].item<int64_t>());
  std::u32string back;
  for (int64_t k = 0; k < 8; ++k) back += c.symbols[static_cast<size_t>(x[0][k].item<int64_t>())];
  CHECK(back == U" wörld h");
  // Bad input: not UTF-8 (with the byte), too short, missing.
  std::ofstream(dir / "bad.txt", std::ios::binary) << "abc\xff"
                                                      "def";
  spec.path = (dir / "bad.txt").string();
  try {
    dataset_shape(spec);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("byte 3") != std::string::npos);
  }
  std::ofstream(dir / "short.txt") << "abcdefgh";
  spec.path = (dir / "short.txt").string();
  CHECK_THROWS_AS(load_dataset(spec, 1), InputError);
  spec.path = (dir / "missing.txt").string();
  CHECK_THROWS_AS(dataset_shape(spec), InputError);
  spec.path = dir.string();  // a folder
  CHECK_THROWS_AS(dataset_shape(spec), InputError);
  std::ofstream(dir / "empty.txt").close();
  spec.path = (dir / "empty.txt").string();
  CHECK_THROWS_AS(dataset_shape(spec), InputError);
  // In a scenario, the message says where: the file, the line and the key data.path.
  const std::string scenario =
      "name = \"t\"\n[model]\nkind = \"transformer\"\nlayers = 1\nd_model = 8\nheads = 2\n"
      "[data]\nkind = \"text\"\nseq_len = 8\npath = \"" +
      (dir / "missing.txt").string() + "\"\n[[devices]]\ncount = 1\n";
  try {
    build_model(parse_scenario(scenario, "t.toml", {}));
    FAIL("no error");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "data.path");
    CHECK(std::string(e.what()).find("t.toml:10") != std::string::npos);
    CHECK(std::string(e.what()).find("missing.txt") != std::string::npos);
  }
  fs::remove_all(dir);
  // The default file is Debian's GPL-3, which every system has (base-files).
  DataSpec gpl;
  gpl.kind = DataKind::kText;
  CHECK(dataset_location(gpl) == "/usr/share/common-licenses/GPL-3");
  CHECK(dataset_shape(gpl).outputs > 60);
}

TEST_CASE("a small GPT learns to sort across two clusters of two stages in simulation",
          "[transformer][sim]") {
  // The shipped scenario, as it is: its loss falls and the sorted half is mostly right.
  auto p = test::prepare(slurp(test::source_path("scenarios/gpt-sort.toml")));
  REQUIRE(p.plan.clusters.size() == 2);
  REQUIRE(p.plan.clusters[0].stages.size() == 2);
  SimResult r = run_simulation(p.spec());
  const auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "numeric", 0});
  std::vector<double> losses;
  for (const Event& e : r.events)
    if (e.kind == EventKind::kLoss) losses.push_back(e.loss);
  REQUIRE(losses.size() >= 200);
  auto mean = [](auto from, auto to) {
    double s = 0;
    for (auto it = from; it != to; ++it) s += *it;
    return s / static_cast<double>(to - from);
  };
  const double early = mean(losses.begin(), losses.begin() + 20),
               late = mean(losses.end() - 20, losses.end());
  INFO("mean loss of the first 20 micro-batches " << early << ", of the last 20 " << late);
  CHECK(late < 0.5 * early);
  CHECK(summary["final"]["test_accuracy"].get<double>() > 0.8);
}

TEST_CASE("gpt-pipeline is one pipeline of four stages cut between blocks", "[transformer]") {
  // The GPU case (bench/gpu.sh): as its comment says, 8 blocks of d_model 512 (25 million
  // parameters), the embeddings with two blocks, two, two, and two with the head.
  auto p = test::prepare(slurp(test::source_path("scenarios/gpt-pipeline.toml")));
  CHECK(p.model.total_params() > 25'000'000);
  CHECK(p.model.total_params() < 26'000'000);
  REQUIRE(p.plan.clusters.size() == 1);
  const ClusterPlan& c = p.plan.clusters[0];
  REQUIRE(c.stages.size() == 4);
  CHECK(c.stages[0].layer_begin == 0);
  CHECK(c.stages[3].layer_end == p.model.layer_count());
  CHECK(p.model.layer_count() == 10);  // the embeddings, 8 blocks, the final norm with the head
  for (const StagePlan& st : c.stages)
    CHECK(p.model.params(st.layer_begin, st.layer_end) > 6'000'000);
}

TEST_CASE("a 1.3-billion-parameter GPT trains on 1,024 PCs in timing mode as the planner predicts",
          "[transformer][sim][scale]") {
  auto p = test::prepare(slurp(test::source_path("scenarios/gpt-1.3b.toml")));
  CHECK(p.model.total_params() > 1'300'000'000);
  CHECK(p.model.total_params() < 1'400'000'000);
  REQUIRE(p.scenario.node_count() == 1024);
  // No PC holds the model: every cluster is a pipeline cut between blocks, each stage within its
  // RAM.
  REQUIRE(p.plan.clusters.size() >= 2);
  for (const ClusterPlan& c : p.plan.clusters) {
    CHECK(c.stages.size() >= 2);
    for (const StagePlan& st : c.stages)
      CHECK(static_cast<double>(st.memory) <= p.scenario.device_of(st.node).ram_bytes());
  }
  SimResult r = run_simulation(p.spec());
  const auto summary = summarize(p.scenario, p.plan, r.events, RunInfo{"sim", "timing", 0});
  CHECK(summary["train_samples"].get<int64_t>() ==
        p.scenario.training.steps * p.scenario.data.batch_size *
            static_cast<int64_t>(p.plan.clusters.size()));
  const double round = summary["averaging"]["mean_round_s"].get<double>();
  INFO("averaging round: simulated " << round << " s, predicted " << p.plan.averaging_time << " s");
  CHECK(round == Approx(p.plan.averaging_time).epsilon(0.10));
  const double rate = summary["samples_per_s"].get<double>();
  INFO("samples/s: simulated " << rate << ", predicted " << p.plan.throughput);
  CHECK(rate == Approx(p.plan.throughput).epsilon(0.10));
}
