// Checkpoints of a GPT (nn/gpt.hpp) through io/checkpoint.hpp: a tiny sparse GPT trained with
// AdamW + RigL (dst::apply_step, topology updates before and after the checkpoint) and
// global-norm clipping resumes bitwise into a GPT built from another seed; a checkpoint of
// one GPT config does not load into another d_ff or another sparse/dense choice, and the
// failed load leaves the target as it was.
#include <sprig/dst/algorithm.hpp>
#include <sprig/models/gpt.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/io/checkpoint.hpp>
#include <sprig/data/text.hpp>
#include <sprig/nn/gpt.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/clip.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

using namespace sprig;

namespace {

using T = float;
using I = std::int32_t;

// A small text of its own (no file): a few verses repeated, 20-odd distinct characters.
const CharText& text() {
  static const CharText t = [] {
    std::string s;
    for (int k = 0; k < 8; ++k)
      s += "to be, or not to be: that is the question. whether tis nobler in the mind to suffer ";
    return char_text(s);
  }();
  return t;
}

constexpr std::int64_t kBatch = 3, kSeq = 8;

models::GPTSpec spec(std::uint64_t seed, std::int64_t d_ff = 32, double attn = 0.5, double ffn = 0.75) {
  models::GPTSpec s;
  s.config = {.layers = 2, .heads = 2, .d_model = 16, .d_ff = d_ff, .block_size = kSeq, .vocab = text().vocab_size()};
  s.attn_sparsity = attn;
  s.ffn_sparsity = ffn;
  s.seed = seed;
  s.growth_reserve = SparseParameter<T, I>::kGrowthReserve;
  return s;
}

AdamW<T> make_opt() { return AdamW<T>({.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}); }

// RigL every 3 steps from 0 to 21: updates at 0, 3, 6, 9 before a checkpoint at 11 and at
// 12, ..., 21 after it.
dst::RigL<T, I> make_rigl() { return dst::RigL<T, I>({.delta_t = 3, .t_begin = 0, .t_end = 21, .alpha = 0.3}, 5); }

// Steps [from, to) as char_gpt runs them: windows drawn from (seed 17, step), forward, loss,
// backward, clipping to 1, apply_step. Returns each step's loss.
std::vector<T> train(GPT<T, I>& model, AdamW<T>& opt, dst::RigL<T, I>& rigl, std::int64_t from, std::int64_t to) {
  const std::span<const std::int32_t> tokens(text().tokens);
  SoftmaxCrossEntropy<T> ce;
  std::vector<std::int64_t> starts(kBatch);
  std::vector<std::int32_t> x(kBatch * kSeq), y(x.size());
  std::vector<T> losses;
  for (std::int64_t t = from; t < to; ++t) {
    sample_window_starts(static_cast<std::int64_t>(tokens.size()), kSeq, 17, static_cast<std::uint64_t>(t), starts);
    gather_sequence_windows(tokens, starts, kSeq, x, y);
    const auto z = model.forward(x, kBatch, kSeq);
    losses.push_back(ce.forward_backward(z, std::span<const int>(y.data(), y.size()), model.output_grad()));
    model.backward();
    clip_grad_norm(model, 1.0);
    dst::apply_step(rigl, opt, model, t);
  }
  return losses;
}

// Every parameter as bits: a sparse one's rows, each row's live entries in slot order as
// (column, value); a dense one's values. A parameter's optimizer state the same way.
struct Bits {
  std::vector<std::vector<std::uint32_t>> values, state;
  bool operator==(const Bits&) const = default;
};
std::uint32_t bits_of(T v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}
Bits parameter_bits(const GPT<T, I>& model) {
  Bits out;
  model.for_each_parameter([&](const auto& p) {
    std::vector<std::uint32_t> v, counts;  // AdamW's per-slot counts: 16-bit, or state[2] as a checkpoint has them
    std::vector<std::vector<std::uint32_t>> st(p.state.size());
    if constexpr (requires { p.matrix.storage_size(); }) {
      for (std::int64_t r = 0; r < p.matrix.rows(); ++r) {
        v.push_back(0xFFFFFFFFu);  // row separator: equal bits mean equal rows, not just equal concatenations
        for (std::int64_t s = p.matrix.row_start(r); s < p.matrix.row_start(r) + p.matrix.row_nnz(r); ++s) {
          const auto slot = static_cast<std::size_t>(s);
          v.push_back(static_cast<std::uint32_t>(p.matrix.col_indices()[slot]));
          v.push_back(bits_of(p.matrix.values()[slot]));
          for (std::size_t q = 0; q < p.state.size(); ++q)
            if (q == 2 && !p.state[q].empty())
              counts.push_back(static_cast<std::uint32_t>(p.state[q][slot]));
            else if (!p.state[q].empty())
              st[q].push_back(bits_of(p.state[q][slot]));
          if (!p.step_counts.empty()) counts.push_back(p.step_counts[slot]);
        }
      }
    } else {
      for (T x : p.value) v.push_back(bits_of(x));
      for (std::size_t q = 0; q < p.state.size(); ++q)
        for (T x : p.state[q]) st[q].push_back(bits_of(x));
    }
    out.values.push_back(std::move(v));
    for (auto& s : st)
      if (!s.empty()) out.state.push_back(std::move(s));
    if (!counts.empty()) out.state.push_back(std::move(counts));
  });
  return out;
}

std::int64_t sparse_parameters(const GPT<T, I>& model) {
  std::int64_t n = 0;
  model.for_each_parameter([&](const auto& p) {
    if constexpr (requires { p.matrix.storage_size(); }) ++n;
  });
  return n;
}

}  // namespace

TEST_CASE("GPT checkpoint: a RigL run resumed at step k is the uninterrupted run bitwise", "[io][checkpoint][gpt]") {
  constexpr std::int64_t kSteps = 24, kStop = 11;

  GPT<T, I> whole = models::build_gpt<T, I>(spec(3));
  REQUIRE(sparse_parameters(whole) == 8);  // qkv, proj, fc, fc_proj of both blocks
  const Bits init = parameter_bits(whole);
  AdamW<T> opt_whole = make_opt();
  dst::RigL<T, I> rigl_whole = make_rigl();
  const std::vector<T> losses_whole = train(whole, opt_whole, rigl_whole, 0, kSteps);
  REQUIRE(rigl_whole.updates() == 8);                  // steps 0, 3, ..., 21
  CHECK(parameter_bits(whole).values != init.values);  // it trained
  CHECK(losses_whole.back() < losses_whole.front());

  GPT<T, I> first = models::build_gpt<T, I>(spec(3));
  AdamW<T> opt_first = make_opt();
  dst::RigL<T, I> rigl_first = make_rigl();
  std::vector<T> losses = train(first, opt_first, rigl_first, 0, kStop);
  REQUIRE(rigl_first.updates() == 4);  // steps 0, 3, 6, 9: the topology moved before the checkpoint
  const std::vector<std::byte> bytes =
      encode_training_state(first, opt_first, {.step = kStop, .seed = 17}, &rigl_first);

  GPT<T, I> second = models::build_gpt<T, I>(spec(99));  // another seed: everything must come from the file
  CHECK(parameter_bits(second).values != parameter_bits(first).values);
  AdamW<T> opt_second = make_opt();
  dst::RigL<T, I> rigl_second = make_rigl();
  const TrainingProgress p = decode_training_state(bytes, "gpt.sprig", second, opt_second, &rigl_second);
  REQUIRE(p.step == kStop);
  CHECK(p.seed == 17);
  CHECK(parameter_bits(second) == parameter_bits(first));  // weights and AdamW's m, v
  CHECK(opt_second.step_count() == opt_first.step_count());
  CHECK(rigl_second.updates() == 4);
  second.reserve_growth();  // loaded matrices are tight: the room for growth again, as char_gpt does
  const std::vector<T> rest = train(second, opt_second, rigl_second, p.step, kSteps);
  losses.insert(losses.end(), rest.begin(), rest.end());

  REQUIRE(losses.size() == losses_whole.size());
  for (std::size_t t = 0; t < losses.size(); ++t) {
    INFO("step " << t << ": resumed " << losses[t] << ", uninterrupted " << losses_whole[t]);
    CHECK(bits_of(losses[t]) == bits_of(losses_whole[t]));
  }
  const Bits resumed = parameter_bits(second), uninterrupted = parameter_bits(whole);
  REQUIRE(resumed.values.size() == uninterrupted.values.size());
  for (std::size_t k = 0; k < resumed.values.size(); ++k) {
    INFO("parameter " << k << " in for_each_parameter order");
    CHECK(resumed.values[k] == uninterrupted.values[k]);
  }
  CHECK(resumed.state == uninterrupted.state);
  CHECK(rigl_second.updates() == rigl_whole.updates());
  CHECK(opt_second.step_count() == opt_whole.step_count());
}

TEST_CASE("GPT checkpoint: another d_ff or another sparse/dense choice is a FormatError naming the parameter",
          "[io][checkpoint][gpt]") {
  GPT<T, I> saved = models::build_gpt<T, I>(spec(3));
  AdamW<T> opt = make_opt();
  dst::RigL<T, I> rigl = make_rigl();
  train(saved, opt, rigl, 0, 2);
  const std::vector<std::byte> bytes = encode_training_state(saved, opt, {.step = 2}, &rigl);

  // Parameters in for_each_parameter order: 0 tok_emb, 1 pos_emb; block 0: 2-3 LN1, 4-5 qkv,
  // 6-7 proj, 8-9 LN2, 10-11 fc, 12-13 fc_proj; block 1 from 14.
  auto unchanged_after_failed_load = [&](GPT<T, I>& target, const std::string& what) {
    AdamW<T> target_opt = make_opt();
    dst::RigL<T, I> target_rigl = make_rigl();
    const Bits before = parameter_bits(target);
    CHECK_THROWS_AS(decode_training_state(bytes, "gpt.sprig", target, target_opt, &target_rigl), FormatError);
    CHECK_THROWS_WITH(decode_training_state(bytes, "gpt.sprig", target, target_opt, &target_rigl),
                      Catch::Contains("gpt.sprig") && Catch::Contains(what));
    CHECK(parameter_bits(target) == before);
    CHECK(target_opt.step_count() == 0);
    CHECK(target_rigl.updates() == 0);
  };

  SECTION("another d_ff: fc's weight (parameter 10) is 32x16 in the file, 48x16 in the model") {
    GPT<T, I> wider = models::build_gpt<T, I>(spec(3, 48));
    unchanged_after_failed_load(wider,
                                "shape mismatch: parameter 10 (sparse parameter) is 32x16 (out x in) in the "
                                "checkpoint but 48x16 in the model");
  }
  SECTION("a dense FFN: fc's weight (parameter 10) is sparse in the file, dense in the model") {
    GPT<T, I> dense_ffn = models::build_gpt<T, I>(spec(3, 32, 0.5, 0.0));
    unchanged_after_failed_load(
        dense_ffn, "parameter 10 is a sparse parameter in the checkpoint but a dense parameter in the model");
  }
  SECTION("dense attention: qkv's weight (parameter 4) is sparse in the file, dense in the model") {
    GPT<T, I> dense_attn = models::build_gpt<T, I>(spec(3, 32, 0.0, 0.75));
    unchanged_after_failed_load(
        dense_attn, "parameter 4 is a sparse parameter in the checkpoint but a dense parameter in the model");
  }
  SECTION("and the other way: a dense model's file into the sparse GPT") {
    GPT<T, I> dense = models::build_gpt<T, I>(spec(3, 32, 0.0, 0.0));
    AdamW<T> dense_opt = make_opt();
    const std::vector<std::byte> dense_bytes = encode_training_state(dense, dense_opt, {});
    GPT<T, I> sparse = models::build_gpt<T, I>(spec(5));
    AdamW<T> sparse_opt = make_opt();
    const Bits before = parameter_bits(sparse);
    CHECK_THROWS_AS(decode_training_state(dense_bytes, "dense.sprig", sparse, sparse_opt), FormatError);
    CHECK_THROWS_WITH(decode_training_state(dense_bytes, "dense.sprig", sparse, sparse_opt),
                      Catch::Contains("dense.sprig") &&
                          Catch::Contains(
                              "parameter 4 is a dense parameter in the checkpoint but a sparse parameter in "
                              "the model"));
    CHECK(parameter_bits(sparse) == before);
  }
}
