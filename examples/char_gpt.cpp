// char_gpt — train a character-level GPT on Tiny Shakespeare, dense or with truly sparse
// projections (PaddedCSR weights and sparse kernels in attention and/or the FFN), with the
// nanoGPT recipe: AdamW betas (0.9, 0.99), weight decay on the projection and head matrices
// only, linear warmup then cosine decay, global-norm clipping, random windows of the block
// size from the first 90% of the text, validation on a fixed set of windows from the last 10%.
//
//   char_gpt                                              # small config, dense
//   char_gpt --ffn-sparsity 0.9                           # FFN 90% sparse
//   char_gpt --attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm rigl
//   char_gpt --config mini40m --ffn-sparsity 0.9 --steps 20   # the speed configuration
//   char_gpt --ffn-sparsity 0.9 --weight-blocks 4x4 --algorithm rigl   # FFN in dense 4x4 blocks
//   char_gpt --attn-sparsity 0.7 --ffn-sparsity 0.9 --precision bf16   # bf16 products
//   char_gpt --attn-sparsity 0.7 --ffn-sparsity 0.9 --algorithm granet   # pruned gradually from 50%
//   mpirun -np 2 char_gpt --ffn-sparsity 0.9 --threads 1  # data parallel over 2 ranks (sprig/dist)
//
// Configs: small = 4 layers, 4 heads, d_model 256, d_ff 1024, block 128, batch 16, 2000
// steps, lr 1e-3 (warmup 100, cosine to 1e-4), clip 1.0, weight decay 0.1; mini40m = 8
// layers, 10 heads, d_model 640, d_ff 2560, block 128, batch 8 (same recipe). --layers,
// --heads, --d-model, --d-ff, --batch, --steps override a config's values.
// Under an MPI launcher with more than one rank (or with --distributed) the run is data
// parallel: --batch sequences are the global batch, each rank trains on its 1/N of them,
// gradients are averaged before clipping (dist::DataParallel), rank 0 prints and writes
// checkpoints, and the end of the run prints every rank's step time and communication.
// --sample N draws N characters at the end with a key/value cache (nn/gpt_generate.hpp) and
// prints its speed (--sample-full-window: the same characters, the whole window per token).
// Models in and out (io/safetensors.hpp; needs nlohmann-json): --export FILE writes the weights
// at the end (atomically; --export-form dense, as PyTorch's load_state_dict takes them, or
// compressed, compressed-tensors' sparse-bitmask); --import FILE starts from a file's weights and
// prints the validation loss right after it, --prune-attn S / --prune-ffn S prune its dense
// projections by magnitude to sparsity S per group (uniform, or per layer by --distribution erk);
// --eval-only trains nothing. A pretrained model pruned and fine-tuned: examples/prune_pretrained.sh.
// Progress goes to stderr; results to stdout, ending with one machine-readable line:
//   RESULT val_loss=<x> ms_per_step=<x> weight_bytes=<n> dense_weight_bytes=<n> tokens_per_s=<x> ...
//          ... export_bytes=<n> import_val_loss=<x>
#include <sprig/models/gpt.hpp>
#include <sprig/dst/granet.hpp>
#include <sprig/dst/rigl.hpp>
#include <sprig/dst/set.hpp>
#include <sprig/dst/snfs.hpp>
#include <sprig/dst/static_topology.hpp>
#include <sprig/io/checkpoint.hpp>
#if defined(CHAR_GPT_SAFETENSORS)
#  include <sprig/io/safetensors.hpp>
#endif
#include <sprig/data/text.hpp>
#include <sprig/nn/block_sparse_linear.hpp>
#include <sprig/nn/gpt.hpp>
#include <sprig/nn/gpt_generate.hpp>
#include <sprig/nn/model.hpp>
#include <sprig/nn/sampling.hpp>
#include <sprig/nn/softmax_cross_entropy.hpp>
#include <sprig/optim/adamw.hpp>
#include <sprig/optim/clip.hpp>
#include <sprig/optim/lr_schedule.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#if defined(_OPENMP)
#  include <omp.h>
#endif

#include "cli_checks.hpp"
#include "freed_memory.hpp"
#include "guarded_main.hpp"
#include "kernel_label.hpp"
#include "progress.hpp"
#include "quantiles.hpp"
#include "ranks.hpp"
#include "run_settings.hpp"
#include "stale_temporaries.hpp"
#include "threads.hpp"

#ifndef CHAR_GPT_DEFAULT_DATA
#  define CHAR_GPT_DEFAULT_DATA "examples/data/tinyshakespeare.txt"
#endif

namespace {

using T = float;
using Clock = std::chrono::steady_clock;

// The ranks of the run (a SingleProcessCommunicator unless distributed), set by main.
sprig::dist::Communicator* ranks = nullptr;

struct Config {
  std::string config = "small";
  std::int64_t layers = 0, heads = 0, d_model = 0, d_ff = 0, block = 128, batch = 0, steps = 0;  // 0: the config's
  bool distributed = false;  // data parallel over MPI ranks (automatic under mpirun -np N > 1)
  double attn_sparsity = 0.0;
  double ffn_sparsity = 0.0;
  std::string distribution = "uniform";
  std::string algorithm = "none";
  double initial_sparsity = 0.5;             // granet / gmp: each sparse group's start, pruned to its sparsity
  std::string bias_correction = "per-slot";  // AdamW's correction of grown weights: per-slot|global
  std::int64_t delta_t = 100;
  double alpha = 0.3;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  std::int64_t warmup = 100;
  std::uint64_t seed = 1;
  int threads = 0;
  std::string data = CHAR_GPT_DEFAULT_DATA;
  std::int64_t eval_every = 250;
  std::int64_t eval_windows = 64;
  std::string csv;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 250;
  bool resume = false;
  std::int64_t stop_after_steps = 0;
  std::int64_t sample_chars = 300;
  double temperature = 0.8;
  bool sample_full_window = false;  // sample without the key/value cache (for comparison)
  bool share_transposes = false;    // one W^T for all the sparse projections (GPTOptions::share_transposes)
  std::string prompt = "\n";
  std::string index_bits = "auto";         // column index width of the sparse projections: auto, 16 or 32
  std::string weight_blocks;               // "RxC": sparse projections in dense R x C blocks; empty: unstructured
  std::string precision = "fp32";          // of the projections' products: fp32 or bf16
  std::string init = "gpt2";               // of the projections and the head: gpt2 or kaiming (GPTInit)
  std::string export_file;                 // --export: the weights as safetensors at the end
  std::string export_form;                 // dense (also when empty) or compressed
  std::string export_dtype;                // fp32 (also when empty) or bf16
  std::string import_file;                 // --import: start from a safetensors file's weights
  std::optional<sprig::RunSettings> resumed;  // not an option: the resumed checkpoint's settings, read once in main
  double prune_attn = -1, prune_ffn = -1;  // --prune-attn/--prune-ffn: magnitude pruning on import (< 0: off)
  bool eval_only = false;                  // no training steps
  bool profile = false;                    // --profile: where a training step's time goes, printed at the end
  std::string dump_logits;                 // --dump-logits: the logits of the first validation windows, as safetensors
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void apply_config_defaults(Config& c) {
  const bool mini = c.config == "mini40m";
  auto pick = [](std::int64_t& v, std::int64_t small, std::int64_t big, bool use_big) {
    if (v == 0) v = use_big ? big : small;
  };
  pick(c.layers, 4, 8, mini);
  pick(c.heads, 4, 10, mini);
  pick(c.d_model, 256, 640, mini);
  pick(c.d_ff, 1024, 2560, mini);
  pick(c.batch, 16, 8, mini);
  pick(c.steps, 2000, 2000, mini);
}

// Mean loss over the fixed validation windows, in batches of `batch` windows.
template <class Model>
double evaluate(Model& model, std::span<const std::int32_t> val, const std::vector<std::int64_t>& starts,
                std::int64_t batch, std::int64_t block) {
  sprig::SoftmaxCrossEntropy<T> ce;
  std::vector<std::int32_t> x(static_cast<std::size_t>(batch * block)), y(x.size());
  double sum = 0.0;
  std::int64_t windows = 0;
  for (std::size_t b0 = 0; b0 < starts.size(); b0 += static_cast<std::size_t>(batch)) {
    const std::size_t n = std::min(starts.size() - b0, static_cast<std::size_t>(batch));
    const std::span<const std::int64_t> s(starts.data() + b0, n);
    const std::span<std::int32_t> xs(x.data(), n * static_cast<std::size_t>(block)), ys(y.data(), xs.size());
    sprig::gather_sequence_windows(val, s, block, xs, ys);
    const auto z = model.forward(xs, static_cast<std::int64_t>(n), block);
    sum += static_cast<double>(ce.forward(z, std::span<const int>(ys.data(), ys.size()))) * static_cast<double>(n);
    windows += static_cast<std::int64_t>(n);
  }
  return sum / static_cast<double>(windows);
}

bool prunes(const Config& c) { return c.algorithm == "granet" || c.algorithm == "gmp"; }

// The spec with each sparse group at --initial-sparsity: where gradual pruning starts.
sprig::models::GPTSpec starting_spec(const Config& cfg, sprig::models::GPTSpec spec) {
  if (spec.attn_sparsity > 0.0) spec.attn_sparsity = cfg.initial_sparsity;
  if (spec.ffn_sparsity > 0.0) spec.ffn_sparsity = cfg.initial_sparsity;
  return spec;
}

// `spec` at the final sparsities; R x C: the block shape (1 x 1 unstructured), whose grids
// GraNet's per-layer lists (models::gpt_sparsities) count.
template <class Index>
std::unique_ptr<sprig::dst::SparsityAlgorithm<T, Index>> make_algorithm(const Config& cfg,
                                                                        const sprig::models::GPTSpec& spec,
                                                                        std::int64_t R, std::int64_t C) {
  if (cfg.algorithm == "none") return nullptr;
  if (cfg.attn_sparsity <= 0.0 && cfg.ffn_sparsity <= 0.0)
    throw sprig::ArgumentError("char_gpt: --algorithm needs --attn-sparsity or --ffn-sparsity > 0");
  // updates until 75% of the run, as RigL's reference schedule
  const auto s = sprig::dst::UpdateSchedule::for_run(cfg.steps, cfg.delta_t, cfg.alpha);
  if (cfg.algorithm == "static") return std::make_unique<sprig::dst::Static<T, Index>>(s, cfg.seed);
  if (cfg.algorithm == "set") return std::make_unique<sprig::dst::SET<T, Index>>(s, cfg.seed);
  if (cfg.algorithm == "rigl") return std::make_unique<sprig::dst::RigL<T, Index>>(s, cfg.seed);
  if (cfg.algorithm == "snfs") return std::make_unique<sprig::dst::SNFS<T, Index>>(s, cfg.seed);
  sprig::dst::GraNetOptions g{.initial_sparsity = sprig::models::gpt_sparsities(starting_spec(cfg, spec), R, C),
                              .final_sparsity = sprig::models::gpt_sparsities(spec, R, C),
                              .regrow = cfg.algorithm == "granet"};
  // ERK makes a matrix dense where its share would exceed 1, more often at lower sparsity
  if (g.initial_sparsity.size() != g.final_sparsity.size())
    throw sprig::ArgumentError(
        "char_gpt: --distribution erk makes " + std::to_string(g.final_sparsity.size() - g.initial_sparsity.size()) +
        " projection(s) dense at --initial-sparsity " + examples::detail::show(cfg.initial_sparsity) +
        " that are sparse at the final sparsities, and a dense one cannot be pruned: raise "
        "--initial-sparsity");
  return std::make_unique<sprig::dst::GraNet<T, Index>>(s, cfg.seed, std::move(g));
}

// Each group's sparsity now (live weights, or blocks on the block grid, over all positions):
// {attention, FFN}, -1 for a group with no sparse projection.
template <class Model>
std::pair<double, double> group_sparsities(Model& model) {
  double live[2] = {0, 0}, size[2] = {0, 0};
  for (const auto& r : model.sparse_layers()) {
    const std::size_t g = r.position % 4 < 2 ? 0 : 1;  // qkv, proj | fc, fc_proj
    const auto& m = r.layer->weight.matrix;
    live[g] += static_cast<double>(r.layer->weight.live_count());
    size[g] += static_cast<double>(m.rows()) * static_cast<double>(m.cols());
  }
  const auto sparsity = [&](std::size_t g) { return size[g] > 0 ? 1.0 - live[g] / size[g] : -1.0; };
  return {sparsity(0), sparsity(1)};
}

// What a training step holds at least (examples/cli_checks.hpp), from the options alone: the
// live weights with their gradients and AdamW's two moments; per layer the attention
// probabilities kept for the backward pass (batch x heads x block(block+1)/2) and, of the
// activations, the input, q, k, v, the attention output and the FFN's hidden layer; the
// logits and their gradient.
examples::MemoryEstimate step_memory(const Config& c, std::int64_t vocab) {
  const double L = static_cast<double>(c.layers), d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff),
               B = static_cast<double>(c.batch), Tn = static_cast<double>(c.block), H = static_cast<double>(c.heads),
               V = static_cast<double>(vocab), f = sizeof(T);
  // gradual pruning starts denser (--initial-sparsity)
  const double sa = prunes(c) && c.attn_sparsity > 0.0 ? c.initial_sparsity : c.attn_sparsity;
  const double sf = prunes(c) && c.ffn_sparsity > 0.0 ? c.initial_sparsity : c.ffn_sparsity;
  const double live = L * (4 * d * d * (1 - sa) + 2 * d * ff * (1 - sf)) + (2 * V + Tn) * d;
  return {.options = "--layers " + std::to_string(c.layers) + " --heads " + std::to_string(c.heads) + " --d-model " +
                     std::to_string(c.d_model) + " --d-ff " + std::to_string(c.d_ff) + " --batch " +
                     std::to_string(c.batch) + " --block " + std::to_string(c.block),
          .parts = {{"weights, gradients and AdamW state", 4 * f * live},
                    {"attention probabilities", f * L * B * H * Tn * (Tn + 1) / 2},
                    {"activations", f * L * B * Tn * (5 * d + ff)},
                    {"logits and their gradient", 2 * f * B * Tn * V}}};
}

// The options of models in and out, checked before any data is read. --prune-attn/--prune-ffn
// set the group's sparsity (so they exclude --attn-sparsity/--ffn-sparsity) and need --import.
void check_model_file_options(Config& c) {
  const auto fail = [](const std::string& what) { throw sprig::ArgumentError("char_gpt: " + what); };
  const bool prune = c.prune_attn >= 0.0 || c.prune_ffn >= 0.0;
#if !defined(CHAR_GPT_SAFETENSORS)
  if (!c.export_file.empty() || !c.import_file.empty() || !c.dump_logits.empty())
    fail(
        "--export, --import and --dump-logits need nlohmann-json (Debian nlohmann-json3-dev); this char_gpt was "
        "built without it");
#endif
  if (!c.export_form.empty() && c.export_file.empty()) fail("--export-form " + c.export_form + " needs --export FILE");
  if (!c.export_dtype.empty() && c.export_file.empty())
    fail("--export-dtype " + c.export_dtype + " needs --export FILE");
  if (prune && c.import_file.empty())
    fail("--prune-attn and --prune-ffn prune an imported model: they need --import FILE");
  if (!c.import_file.empty() && c.resume)
    fail(
        "--import and --resume conflict: a resumed run takes its weights from the checkpoint (resume without "
        "--import)");
  if (prune && (c.attn_sparsity > 0.0 || c.ffn_sparsity > 0.0))
    fail(
        "--prune-attn/--prune-ffn and --attn-sparsity/--ffn-sparsity conflict: with --import, --prune-attn S and "
        "--prune-ffn S set the groups' sparsities");
  if (prune && !c.weight_blocks.empty())
    fail("--prune-attn/--prune-ffn prune unstructured weights: not with --weight-blocks");
  if (c.prune_attn >= 0.0) c.attn_sparsity = c.prune_attn;
  if (c.prune_ffn >= 0.0) c.ffn_sparsity = c.prune_ffn;
  if (!c.import_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(c.import_file, ec)) fail("--import " + c.import_file + ": no such file");
    if (std::filesystem::is_directory(c.import_file, ec))
      fail("--import " + c.import_file + ": a directory, not a file");
  }
  // an output written after the run: its directory checked now, no file created
  for (const auto& [option, path] : {std::pair<std::string, std::string>{"--export", c.export_file},
                                     std::pair<std::string, std::string>{"--dump-logits", c.dump_logits}}) {
    if (path.empty()) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail(option + " " + path + ": a directory, not a file");
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    if (!std::filesystem::is_directory(dir, ec)) fail(option + " " + path + ": cannot write: no directory " + dir);
    std::string probe = (std::filesystem::path(dir) / ".write_check.XXXXXX").string();
    const int fd = ::mkstemp(probe.data());
    if (fd < 0) fail(option + " " + path + ": cannot write in " + dir + ": " + std::strerror(errno));
    ::close(fd);
    ::unlink(probe.c_str());
  }
}

#if defined(CHAR_GPT_SAFETENSORS)
// The alphabet as a JSON array of byte values (metadata is JSON text, and a text's bytes need
// not be UTF-8), so an import can check that the file was trained on the same characters.
std::string alphabet_json(const sprig::CharText& text) {
  std::string out = "[";
  for (std::size_t i = 0; i < text.alphabet.size(); ++i)
    out += (i ? "," : "") + std::to_string(static_cast<int>(text.alphabet[i]));
  return out + "]";
}

// Imports --import's weights into the model (all or nothing, io/safetensors.hpp), pruned by
// magnitude to the model's densities with --prune-attn/--prune-ffn. A file char_gpt wrote must
// have been trained on the same alphabet.
template <class Model>
void import_weights(const Config& c, const sprig::CharText& text, Model& model) {
  const auto bytes = sprig::detail::ckpt::read_file(c.import_file);
  const sprig::SafetensorsFile file = sprig::parse_safetensors(bytes, c.import_file);
  if (const auto it = file.metadata.find("char_gpt.alphabet");
      it != file.metadata.end() && it->second != alphabet_json(text))
    throw sprig::ArgumentError("char_gpt: --import " + c.import_file + " was trained on another alphabet (" +
                               it->second + ") than --data " + c.data + "'s (" + alphabet_json(text) + ")");
  const bool prune = c.prune_attn >= 0.0 || c.prune_ffn >= 0.0;
  sprig::decode_safetensors(std::span<const std::byte>(bytes), c.import_file, model, {.prune_to_model_density = prune});
}

// Writes the logits of the first min(batch, validation windows) validation windows to `path`
// (atomically): tokens I32 [n, block], logits F32 [n, block, vocab], for a comparison with
// another implementation (bench/compare_python/safetensors_check.py).
template <class Model>
void write_logits(const std::string& path, Model& model, std::span<const std::int32_t> val,
                  const std::vector<std::int64_t>& starts, std::int64_t batch, std::int64_t block) {
  namespace st = sprig::detail::st;
  const std::size_t n = std::min(starts.size(), static_cast<std::size_t>(batch));
  std::vector<std::int32_t> x(n * static_cast<std::size_t>(block)), y(x.size());
  sprig::gather_sequence_windows(val, std::span<const std::int64_t>(starts.data(), n), block, x, y);
  const auto z = model.forward(x, static_cast<std::int64_t>(n), block);  // [vocab x n * block]
  std::vector<std::byte> tokens, logits;
  for (std::int32_t t : x) st::put_le(tokens, t);
  for (std::int64_t col = 0; col < z.cols(); ++col)
    for (std::int64_t v = 0; v < z.rows(); ++v) st::put_le(logits, z(v, col));
  const auto nn = static_cast<std::int64_t>(n);
  const auto bytes = sprig::encode_safetensors_tensors({{"tokens", "I32", {nn, block}, std::move(tokens)},
                                                        {"logits", "F32", {nn, block, z.rows()}, std::move(logits)}},
                                                       {{"format", "pt"}});
  sprig::detail::ckpt::write_file_atomically(path, bytes, "char_gpt --dump-logits");
}
#endif

// What defines the model and the run (examples/run_settings.hpp), saved in each checkpoint and
// compared on --resume. Not settings, so free to change on resume: --threads, --eval-every,
// --eval-windows, --init (a resume loads the weights), --csv, --checkpoint-every, --stop-after-steps, --sample,
// --sample-full-window, --temperature, --prompt, --distributed, --export, --export-form,
// --export-dtype, --eval-only, --dump-logits, --share-transposes.
template <class Index>
sprig::RunSettings run_settings(const Config& c, const sprig::CharText& text) {
  sprig::RunSettings s;
  examples::add_setting(s, "--layers", c.layers);
  examples::add_setting(s, "--heads", c.heads);
  examples::add_setting(s, "--d-model", c.d_model);
  examples::add_setting(s, "--d-ff", c.d_ff);
  examples::add_setting(s, "--block", c.block);
  examples::add_setting(s, "--batch", c.batch);
  examples::add_setting(s, "--steps", c.steps);  // the cosine's and the DST schedule's length
  examples::add_setting(s, "--attn-sparsity", c.attn_sparsity);
  examples::add_setting(s, "--ffn-sparsity", c.ffn_sparsity);
  examples::add_setting(s, "--distribution", c.distribution);
  examples::add_setting(s, "--weight-blocks", c.weight_blocks.empty() ? std::string("none") : c.weight_blocks);
  examples::add_setting(s, "--index-bits", static_cast<int>(8 * sizeof(Index)));
  examples::add_setting(s, "--precision", c.precision);
  examples::add_setting(s, "--algorithm", c.algorithm);
  if (prunes(c)) examples::add_setting(s, "--initial-sparsity", c.initial_sparsity);  // older checkpoints lack it
  examples::add_setting(s, "--delta-t", c.delta_t);
  examples::add_setting(s, "--alpha", c.alpha);
  examples::add_setting(s, "--bias-correction", c.bias_correction);
  examples::add_setting(s, "--lr", c.lr);
  examples::add_setting(s, "--min-lr", c.min_lr);
  examples::add_setting(s, "--warmup", c.warmup);
  examples::add_setting(s, "--weight-decay", c.weight_decay);
  examples::add_setting(s, "--clip", c.clip);
  examples::add_setting(s, "--seed", c.seed);
  examples::add_setting(s, "--data",
                        "a text of " + std::to_string(text.size()) + " characters, vocabulary " +
                            std::to_string(text.vocab_size()));
  return s;
}

// Block... empty: unstructured sparse projections; one BlockSparseLinear type: in its blocks.
template <class Index, class... Block>
int run(Config cfg) {
  constexpr bool blocks = sizeof...(Block) > 0;
  apply_config_defaults(cfg);
  if (cfg.threads > 0) examples::choose_threads(cfg.threads, 0);
  const sprig::CharText text = sprig::read_char_text(cfg.data);
  const auto [train, val] = sprig::split_tokens(text.tokens, 0.9);
  std::printf("data: %s, %lld characters, vocabulary %lld; %zu train / %zu validation tokens\n", cfg.data.c_str(),
              static_cast<long long>(text.size()), static_cast<long long>(text.vocab_size()), train.size(), val.size());
  // What depends on the data is checked before the model is built, so no run is lost to it.
  const std::size_t shortest = std::min(train.size(), val.size());
  if (static_cast<std::uint64_t>(cfg.block) >= shortest)
    throw sprig::ArgumentError("char_gpt: --block " + std::to_string(cfg.block) + " is too long for " + cfg.data +
                               ": its " + (train.size() <= val.size() ? "training" : "validation") + " split has " +
                               std::to_string(shortest) + " tokens, and a window needs --block + 1");
  if (cfg.sample_chars > 0)
    for (std::size_t i = 0; i < cfg.prompt.size(); ++i)
      if (text.token_of[static_cast<unsigned char>(cfg.prompt[i])] < 0)
        throw sprig::ArgumentError("char_gpt: --prompt: character " + std::to_string(i) + " (byte " +
                                   std::to_string(static_cast<unsigned char>(cfg.prompt[i])) + ") does not occur in " +
                                   cfg.data + ", so the model has no token for it");

  const std::size_t val_windows = val.size() - static_cast<std::size_t>(cfg.block);
  if (static_cast<std::uint64_t>(cfg.eval_windows) > val_windows)
    throw sprig::ArgumentError("char_gpt: --eval-windows " + std::to_string(cfg.eval_windows) +
                               ": the validation split of " + cfg.data + " has " + std::to_string(val_windows) +
                               " distinct windows of --block " + std::to_string(cfg.block));
  examples::require_fits_in_memory("char_gpt", step_memory(cfg, text.vocab_size()));
  const sprig::RunSettings settings = run_settings<Index>(cfg, text);
  const std::filesystem::path state_file = examples::checkpoint_state_file(cfg.checkpoint_dir);
  if (cfg.resumed) examples::check_resume_settings("char_gpt", state_file, *cfg.resumed, settings);

  const bool changes_topology = cfg.algorithm != "none" && cfg.algorithm != "static";
  sprig::models::GPTSpec spec;
  spec.config = {.layers = cfg.layers,
                 .heads = cfg.heads,
                 .d_model = cfg.d_model,
                 .d_ff = cfg.d_ff,
                 .block_size = cfg.block,
                 .vocab = text.vocab_size()};
  spec.attn_sparsity = cfg.attn_sparsity;
  spec.ffn_sparsity = cfg.ffn_sparsity;
  spec.distribution =
      cfg.distribution == "erk" ? sprig::models::Distribution::erk : sprig::models::Distribution::uniform;
  spec.seed = cfg.seed;
  spec.init = cfg.init == "gpt2" ? sprig::GPTInit::gpt2 : sprig::GPTInit::kaiming_uniform;
  spec.precision = sprig::parse_precision(cfg.precision);
  // Rows come tight: a fixed topology never grows, and a topology update relocates the rows
  // that grow into the growth reserve and compacts after (compact_threshold 0); 20% slack per
  // row saved no update time at mini40m and cost its slots' weights, gradients and optimizer
  // state (28 MB in bf16 8x8 RigL; docs/transformers.md, "Tight rows").
  spec.padding_ratio = 0;
  if (changes_topology) spec.growth_reserve = sprig::SparseParameter<T, Index>::kGrowthReserve;
  const auto algorithm = [&] {
    if constexpr (blocks)
      return make_algorithm<Index>(cfg, spec, Block::kBlockRows..., Block::kBlockCols...);
    else
      return make_algorithm<Index>(cfg, spec, 1, 1);
  }();
  if (prunes(cfg)) spec = starting_spec(cfg, spec);                    // built there, pruned along the cubic schedule
  spec.keep_output_grads = algorithm && algorithm->needs_gradients();  // the dY only DST reads
  spec.share_transposes = cfg.share_transposes;
  auto model = [&] {
    if constexpr (blocks)
      return sprig::models::build_block_gpt<T, Index, Block::kBlockRows..., Block::kBlockCols...>(spec);
    else
      return sprig::models::build_gpt<T, Index>(spec);
  }();
#if defined(CHAR_GPT_SAFETENSORS)
  if (!cfg.import_file.empty()) {
    import_weights(cfg, text, model);
    if (changes_topology) model.reserve_growth();  // imported patterns come tight: the room again
    std::printf("imported %s%s\n", cfg.import_file.c_str(),
                cfg.prune_attn < 0.0 && cfg.prune_ffn < 0.0 ? ""
                : prunes(cfg) ? ", pruned by magnitude to --initial-sparsity (one-shot), then gradually by the topology"
                              : ", pruned by magnitude to the densities below (one-shot)");
  }
#endif
  const sprig::ParameterMemory pm0 = sprig::parameter_memory(model);
  const int threads = examples::choose_threads(cfg.threads, 3 * pm0.parameters * cfg.batch * cfg.block);
  std::printf(
      "model: %s, %lld layers, %lld heads, d_model %lld, d_ff %lld, block %lld; attention %.0f%% sparse, "
      "FFN %.0f%% sparse (%s%s, %d-bit indices, %s products); %lld of %lld parameters live; batch %lld, %d "
      "thread(s); %s\n",
      cfg.config.c_str(), static_cast<long long>(cfg.layers), static_cast<long long>(cfg.heads),
      static_cast<long long>(cfg.d_model), static_cast<long long>(cfg.d_ff), static_cast<long long>(cfg.block),
      100 * cfg.attn_sparsity, 100 * cfg.ffn_sparsity, cfg.distribution.c_str(),
      blocks ? (", in " + cfg.weight_blocks + " blocks").c_str() : "", static_cast<int>(8 * sizeof(Index)),
      cfg.precision.c_str(), static_cast<long long>(pm0.parameters), static_cast<long long>(pm0.dense_parameters),
      static_cast<long long>(cfg.batch), threads, examples::kernel_label().c_str());

  sprig::AdamW<T> opt({.lr = cfg.lr,
                       .beta1 = 0.9,
                       .beta2 = 0.99,
                       .weight_decay = cfg.weight_decay,
                       .bias_correction = cfg.bias_correction == "global" ? sprig::AdamWBiasCorrection::global
                                                                          : sprig::AdamWBiasCorrection::per_slot});
  const sprig::CosineWarmupLR schedule(cfg.lr, std::min(cfg.warmup, cfg.steps - 1), cfg.steps, cfg.min_lr);
  std::printf(
      "optimizer: AdamW betas (0.9, 0.99), %s bias correction, lr %g (warmup %lld, cosine to %g), weight decay %g on matrices, "
      "clip %g; %lld steps; topology: %s%s\n",
      cfg.bias_correction.c_str(), cfg.lr, static_cast<long long>(cfg.warmup), cfg.min_lr, cfg.weight_decay, cfg.clip,
      static_cast<long long>(cfg.steps), algorithm ? cfg.algorithm.c_str() : "fixed",
      prunes(cfg) ? (", each sparse group from " + examples::detail::show(cfg.initial_sparsity) +
                     " sparse to its own along the cubic schedule")
                        .c_str()
                  : "");

  sprig::dist::Communicator& comm = *ranks;
  const sprig::dist::Shard shard = sprig::dist::shard(cfg.batch, comm);  // sequences of each batch
  if (comm.size() > 1)
    std::printf("data parallel: %d ranks (%s), %lld of each batch's %lld sequences per rank\n", comm.size(),
                comm.name().c_str(), static_cast<long long>(shard.size), static_cast<long long>(cfg.batch));
  const std::vector<std::int64_t> val_starts =
      sprig::evaluation_window_starts(static_cast<std::int64_t>(val.size()), cfg.block, cfg.eval_windows);
  double import_val_loss = std::nan("");
  if (!cfg.import_file.empty()) {
    import_val_loss = evaluate(model, val, val_starts, cfg.batch, cfg.block);
    std::printf("val loss %.4f right after the import%s\n", import_val_loss,
                cfg.prune_attn >= 0.0 || cfg.prune_ffn >= 0.0 ? " and pruning" : "");
    std::fflush(stdout);
  }

  std::ofstream csv;
  if (!cfg.csv.empty()) {
    csv.open(cfg.csv, cfg.resume ? std::ios::app : std::ios::trunc);
    if (!csv) throw sprig::ArgumentError("char_gpt: cannot write the CSV file '" + cfg.csv + "'");
    if (!cfg.resume) csv << "step,train_loss,val_loss,elapsed_s,lr\n";
  }

  // Checkpoints: the whole training state to DIR/state.sprig; the data windows depend on
  // (seed, step) alone, so a resumed run is the uninterrupted one bitwise (same threads).
  sprig::TrainingProgress start{.seed = cfg.seed};
  if (!state_file.empty()) std::filesystem::create_directories(cfg.checkpoint_dir);
  if (cfg.resume) {
    if (std::filesystem::exists(state_file)) {
      start = sprig::dist::load_training_state(comm, state_file, model, opt, algorithm.get());
      if (start.seed != cfg.seed)
        throw sprig::ArgumentError("char_gpt: the checkpoint was made with --seed " + std::to_string(start.seed));
      if (changes_topology) model.reserve_growth();  // loaded matrices come tight: the room again
      std::printf("resumed from %s at step %lld\n", state_file.c_str(), static_cast<long long>(start.step));
    } else {
      std::printf("no checkpoint in %s yet: starting from scratch\n", cfg.checkpoint_dir.c_str());
    }
  }

  std::vector<std::int64_t> starts(static_cast<std::size_t>(cfg.batch));
  std::vector<std::int32_t> x(static_cast<std::size_t>(shard.size * cfg.block)), y(x.size());
  sprig::SoftmaxCrossEntropy<T> ce;
  sprig::dist::DataParallel dp(comm, model);  // one rank: every call an identity
  const examples::ProgressBar progress(20);
  double train_seconds = 0.0, smooth = 0.0, val_loss = std::nan("");
  std::vector<double> step_seconds;  // each step's time: the median and the first step reported apart
  sprig::GPTPhaseClock clock;        // --profile: the model's own phases (GPT::set_phase_clock) and
  double loss_seconds = 0.0, update_seconds = 0.0;  // the loss, and clipping with the updates, timed here
  double topology_seconds = 0.0;                    // of update_seconds, the topology updates' own
  step_seconds.reserve(static_cast<std::size_t>(std::max<std::int64_t>(0, cfg.steps - start.step)));
  const auto t_run = Clock::now();
  std::int64_t step = start.step;
  bool swept = false;  // the stale temporaries of a killed save: removed before the first save
  for (; step < cfg.steps && !cfg.eval_only; ++step) {
    const auto t0 = Clock::now();
    sprig::sample_window_starts(static_cast<std::int64_t>(train.size()), cfg.block, cfg.seed,
                                static_cast<std::uint64_t>(step), starts);
    // this rank's sequences of the global batch (all of them on one process)
    sprig::gather_sequence_windows(train,
                                   std::span<const std::int64_t>(starts).subspan(static_cast<std::size_t>(shard.begin),
                                                                                 static_cast<std::size_t>(shard.size)),
                                   cfg.block, x, y);
    if (cfg.profile) model.set_phase_clock(&clock);  // the training step's forward and backward only
    const auto z = model.forward(x, shard.size, cfg.block);
    const auto t_loss = Clock::now();
    const T local_loss = ce.forward_backward(z, std::span<const int>(y.data(), y.size()), model.output_grad());
    const double loss = sprig::check_finite(dp.average(local_loss), "the training loss", step + 1);  // every rank alike
    loss_seconds += seconds_since(t_loss);
    dp.backward();  // with the gradient average over the ranks, so clipping sees the global gradient
    model.set_phase_clock(nullptr);
    const auto t_update = Clock::now();
    try {
      sprig::clip_grad_norm(model, cfg.clip);
    } catch (const sprig::ArgumentError&) {
      sprig::check_finite(sprig::grad_norm(model), "the gradient norm", step + 1);  // DivergenceError with the step
      throw;
    }
    opt.set_lr(schedule(step));
    if (algorithm) {
      const double before = algorithm->total_seconds();
      dp.apply_step(*algorithm, opt, step);
      topology_seconds += algorithm->total_seconds() - before;
    } else
      opt.step(model);
    update_seconds += seconds_since(t_update);
    step_seconds.push_back(seconds_since(t0));
    train_seconds += step_seconds.back();
    smooth = step == start.step ? loss : 0.95 * smooth + 0.05 * loss;
    // the rate after the first step (its first touch of every buffer costs up to twice a step)
    const auto warm = static_cast<std::int64_t>(step_seconds.size()) - 1;
    const double rate_seconds = warm > 0 ? train_seconds - step_seconds.front() : train_seconds;
    progress.update("", step, cfg.steps, smooth,
                    static_cast<double>(std::max<std::int64_t>(warm, 1) * cfg.batch * cfg.block) /
                        std::max(rate_seconds, 1e-9),
                    "tok/s");
    const bool last = step + 1 == cfg.steps;
    if ((cfg.eval_every > 0 && (step + 1) % cfg.eval_every == 0) || last) {
      val_loss = evaluate(model, val, val_starts, cfg.batch, cfg.block);
      std::printf("step %lld: train loss %.4f (smoothed) | val loss %.4f | %.1f s\n", static_cast<long long>(step + 1),
                  smooth, val_loss, seconds_since(t_run));
      std::fflush(stdout);
      if (csv) csv << step + 1 << ',' << smooth << ',' << val_loss << ',' << train_seconds << ',' << opt.lr() << '\n';
    }
    // every --checkpoint-every steps (0: none in between) and always at the end
    if (!state_file.empty() && ((cfg.checkpoint_every > 0 && (step + 1) % cfg.checkpoint_every == 0) || last)) {
      if (!swept && comm.rank() == 0)
        if (const std::int64_t n = examples::remove_stale_temporaries(state_file); n > 0)
          std::printf("removed %lld stale temporary file(s) of an interrupted save beside %s\n",
                      static_cast<long long>(n), state_file.c_str());
      swept = true;
      sprig::dist::save_training_state(comm, state_file, model, opt, {.step = step + 1, .seed = cfg.seed},
                                       algorithm.get(), settings);
    }
    if (cfg.stop_after_steps > 0 && step + 1 == cfg.stop_after_steps) {
      std::printf("stopping after step %lld (--stop-after-steps), as if killed\n", static_cast<long long>(step + 1));
      return 3;
    }
  }
  if (start.step >= cfg.steps || cfg.eval_only) val_loss = evaluate(model, val, val_starts, cfg.batch, cfg.block);
  if (cfg.eval_only) std::printf("val loss %.4f (--eval-only: no training)\n", val_loss);

  std::int64_t export_bytes = 0;
#if defined(CHAR_GPT_SAFETENSORS)
  if (!cfg.dump_logits.empty() && comm.rank() == 0) {
    write_logits(cfg.dump_logits, model, val, val_starts, cfg.batch, cfg.block);
    std::printf("logits of %lld validation windows written to %s\n",
                static_cast<long long>(std::min<std::int64_t>(cfg.batch, std::ssize(val_starts))),
                cfg.dump_logits.c_str());
  }
  if (!cfg.export_file.empty() && comm.rank() == 0) {
    const bool compressed = cfg.export_form == "compressed";
    sprig::save_safetensors(cfg.export_file, model,
                            {.sparse_form = compressed ? sprig::SparseForm::compressed : sprig::SparseForm::dense,
                             .dtype = cfg.export_dtype == "bf16" ? sprig::SafetensorsDtype::bf16
                                                                 : sprig::SafetensorsDtype::native,
                             .metadata = {{"char_gpt.alphabet", alphabet_json(text)}}});
    export_bytes = static_cast<std::int64_t>(std::filesystem::file_size(cfg.export_file));
    std::printf("exported %s: %lld bytes (%s form)\n", cfg.export_file.c_str(), static_cast<long long>(export_bytes),
                compressed ? "compressed sparse-bitmask" : "dense");
  }
#endif

  double sample_seconds = 0.0;
  if (cfg.sample_chars > 0) {
    const std::vector<std::int32_t> prompt = text.encode(cfg.prompt);
    const auto t_sample = Clock::now();
    // the same tokens either way (nn/gpt_generate.hpp); the cache skips recomputing the prefix
    const auto out = cfg.sample_full_window
                         ? sprig::generate(model, prompt, cfg.sample_chars, cfg.temperature, cfg.seed)
                         : sprig::generate_cached(model, prompt, cfg.sample_chars, cfg.temperature, cfg.seed);
    sample_seconds = seconds_since(t_sample);
    std::printf("sample (temperature %g):\n%s\n", cfg.temperature, text.decode(out).c_str());
  }

  const std::int64_t steps_run = std::max<std::int64_t>(1, step - start.step);
  const double ms_per_step = 1e3 * train_seconds / static_cast<double>(steps_run);
  const double tokens_per_s =  // 0 when no step ran (--eval-only, or a resume at the end)
      step > start.step ? static_cast<double>(steps_run * cfg.batch * cfg.block) / std::max(train_seconds, 1e-9) : 0.0;
  const double median_ms =  // 0 when no step ran
      step_seconds.empty() ? 0.0 : 1e3 * examples::quantiles(step_seconds).median;
  const sprig::ParameterMemory pm = sprig::parameter_memory(model);
  const std::int64_t rss = examples::peak_rss_bytes();
  const std::int64_t everything = model.memory_bytes();
  const std::int64_t scratch = model.scratch_bytes();  // the kernels' packing buffers, shared by the layers
  std::printf(
      "weights %lld bytes (%.1f%% of dense %lld); optimizer state %lld; gradients %lld; activations, their "
      "gradients and layer caches %lld; kernel scratch %lld; peak RSS %lld\n",
      static_cast<long long>(pm.weights),
      100.0 * static_cast<double>(pm.weights) / static_cast<double>(pm.dense_weights),
      static_cast<long long>(pm.dense_weights), static_cast<long long>(pm.optimizer_state),
      static_cast<long long>(pm.gradients),
      static_cast<long long>(everything - pm.weights - pm.optimizer_state - pm.gradients - scratch),
      static_cast<long long>(scratch), static_cast<long long>(rss));
  if (!step_seconds.empty())  // after the sample's text and "weights": what resume tests compare holds no timing
    std::printf("training: %zu steps in %.3f s, %.2f ms a step (median %.2f ms, first step %.2f ms)\n",
                step_seconds.size(), train_seconds, ms_per_step, median_ms, 1e3 * step_seconds.front());
  if (cfg.profile && !step_seconds.empty()) {
    const auto n = static_cast<double>(step_seconds.size());
    const auto line = [&](const char* what, double seconds) {
      std::printf("  %-62s %9.3f ms %6.1f%%\n", what, 1e3 * seconds / n, 100.0 * seconds / train_seconds);
    };
    std::printf("profile: where a training step's time goes (mean over %zu steps, %.2f ms a step):\n",
                step_seconds.size(), ms_per_step);
    for (std::size_t p = 0; p < sprig::GPTPhaseClock::kPhases; ++p) {
      const auto phase = static_cast<sprig::GPTPhase>(p);
      line(sprig::gpt_phase_name(phase), clock.seconds(phase));
    }
    line("loss (softmax cross-entropy + dlogits; the ranks' average)", loss_seconds);
    line("clipping and the optimizer", update_seconds - topology_seconds);
    if (algorithm) line("topology updates", topology_seconds);
    // the rest of each step: the batch's windows, and the ranks' gradient sums where there are ranks
    line("data and the rest", train_seconds - clock.total_seconds() - loss_seconds - update_seconds);
  } else if (cfg.profile) {
    std::printf("profile: no training step ran, nothing to profile\n");
  }
  if (comm.size() > 1) examples::report_ranks(comm, dp, train_seconds, steps_run);
  if (algorithm)
    std::printf("topology updates: %lld, %.3f s in total (%.2f%% of training time)\n",
                static_cast<long long>(algorithm->updates()), algorithm->total_seconds(),
                100.0 * algorithm->total_seconds() / std::max(train_seconds, 1e-9));
  if (prunes(cfg)) {
    const auto [attn, ffn] = group_sparsities(model);
    std::printf("sparsity now%s: attention %s, FFN %s\n", blocks ? " (of the block grid)" : "",
                attn < 0 ? "dense" : (examples::detail::show(100.0 * attn) + "%").c_str(),
                ffn < 0 ? "dense" : (examples::detail::show(100.0 * ffn) + "%").c_str());
  }
  const double sample_tokens_per_s = static_cast<double>(cfg.sample_chars) / std::max(sample_seconds, 1e-9);
  if (cfg.sample_chars > 0)  // after the sample's text: its timing is no part of what resume tests compare
    std::printf("sampling: %lld tokens in %.3f s, %.1f tokens/s (%s)\n", static_cast<long long>(cfg.sample_chars),
                sample_seconds, sample_tokens_per_s,
                cfg.sample_full_window ? "full window per token" : "key/value cache");
  std::printf(
      "RESULT val_loss=%.4f ms_per_step=%.2f weight_bytes=%lld dense_weight_bytes=%lld tokens_per_s=%.0f "
      "optimizer_state_bytes=%lld peak_rss_bytes=%lld sample_tokens_per_s=%.1f export_bytes=%lld import_val_loss=%.4f "
      "median_ms_per_step=%.2f\n",
      val_loss, ms_per_step, static_cast<long long>(pm.weights), static_cast<long long>(pm.dense_weights), tokens_per_s,
      static_cast<long long>(pm.optimizer_state), static_cast<long long>(rss),
      cfg.sample_chars > 0 ? sample_tokens_per_s : 0.0, static_cast<long long>(export_bytes), import_val_loss,
      median_ms);
  return 0;
}

}  // namespace

namespace {

int program(int argc, char** argv) {
  examples::return_freed_arrays();
  Config cfg;
  CLI::App app{"Train a character-level GPT with truly sparse projections on Tiny Shakespeare"};
  app.add_option("--config", cfg.config, "small or mini40m")
      ->check(CLI::IsMember({"small", "mini40m"}))
      ->capture_default_str();
  app.add_option("--attn-sparsity", cfg.attn_sparsity, "Fraction of zero weights in qkv and proj (0 = dense)")
      ->check(examples::in_range(0.0, 0.9999))
      ->capture_default_str();
  app.add_option("--ffn-sparsity", cfg.ffn_sparsity, "Fraction of zero weights in fc and fc_proj (0 = dense)")
      ->check(examples::in_range(0.0, 0.9999))
      ->capture_default_str();
  app.add_option("--distribution", cfg.distribution, "Densities within each group: uniform or erk")
      ->check(CLI::IsMember({"uniform", "erk"}))
      ->capture_default_str();
  app.add_option("--bias-correction", cfg.bias_correction,
                 "AdamW: correct a grown weight's moments with its own step count (per-slot) or the global one")
      ->check(CLI::IsMember({"per-slot", "global"}))
      ->capture_default_str();
  app.add_option("--algorithm", cfg.algorithm,
                 "Dynamic sparse training: none, static, set, rigl, snfs, granet (gradual pruning with regrowth) or gmp "
                 "(gradual magnitude pruning)")
      ->check(CLI::IsMember({"none", "static", "set", "rigl", "snfs", "granet", "gmp"}))
      ->capture_default_str();
  app.add_option("--initial-sparsity", cfg.initial_sparsity,
                 "granet / gmp: the sparsity each sparse group starts at, pruned to --attn-sparsity / --ffn-sparsity "
                 "by the cubic schedule")
      ->check(examples::in_range(0.0, 0.9999))
      ->capture_default_str();
  app.add_option("--delta-t", cfg.delta_t, "Steps between topology updates")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--alpha", cfg.alpha, "Initial drop fraction")
      ->check(examples::in_range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--steps", cfg.steps, "Training steps (default: the config's, 2000)")->check(examples::positive());
  app.add_option("--batch", cfg.batch, "Sequences per step (default: the config's; the step's memory must fit in RAM)")
      ->check(examples::positive());
  app.add_option(
         "--block", cfg.block,
         "Block size (tokens per sequence; below the shorter split's length, and the step's memory must fit in RAM)")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--layers", cfg.layers, "Override the config's layers")->check(examples::positive());
  app.add_option("--heads", cfg.heads, "Override the config's heads")->check(examples::positive());
  app.add_option("--d-model", cfg.d_model, "Override the config's d_model")->check(examples::positive());
  app.add_option("--d-ff", cfg.d_ff, "Override the config's d_ff")->check(examples::positive());
  app.add_option("--lr", cfg.lr, "Peak learning rate")->check(examples::positive())->capture_default_str();
  app.add_option("--min-lr", cfg.min_lr, "Learning rate at the end of the cosine")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_option("--warmup", cfg.warmup, "Linear warmup steps")->check(examples::non_negative())->capture_default_str();
  app.add_option("--weight-decay", cfg.weight_decay, "AdamW weight decay (matrices only)")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_option("--clip", cfg.clip, "Global gradient-norm clipping threshold")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "Seed of weights, topology and data windows")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_option("--threads", cfg.threads,
                 "OpenMP threads, at most 1024 (0: 1 for a small model, else the cores not busy; examples/threads.hpp)")
      ->check(examples::threads_range())
      ->capture_default_str();
  app.add_option("--data", cfg.data, "The text file")->capture_default_str();
  app.add_option("--eval-every", cfg.eval_every, "Steps between validation evaluations (and at the end)")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_option("--eval-windows", cfg.eval_windows,
                 "Fixed validation windows (at most the validation split's length - --block)")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--csv", cfg.csv, "Write the curve (step, train and validation loss, time, lr) to this CSV file");
  app.add_option("--checkpoint", cfg.checkpoint_dir, "Save the training state to DIR/state.sprig (atomically)");
  app.add_option("--checkpoint-every", cfg.checkpoint_every,
                 "Steps between checkpoints (0: only at the end; a checkpoint is always written at the end)")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_flag(
      "--resume", cfg.resume,
      "Continue from DIR/state.sprig of --checkpoint if it exists. Every option that defines the model and the run "
      "must equal the checkpoint's (refused otherwise); these may change: --threads, --eval-every, "
      "--eval-windows, --csv, --checkpoint-every, --stop-after-steps, --sample, --sample-full-window, --temperature, --prompt, "
      "--distributed, --export, --export-form, --export-dtype, --eval-only, --dump-logits, --share-transposes");
  app.add_option("--stop-after-steps", cfg.stop_after_steps, "Exit after this many steps, as if killed (tests resume)")
      ->check(examples::non_negative());
  app.add_option("--export", cfg.export_file,
                 "Write the weights to this safetensors file at the end (atomically; names as gpt_torch.py's)");
  app.add_option("--export-form", cfg.export_form,
                 "Sparse weights in --export: dense (materialised; the default) or compressed (sparse-bitmask)")
      ->check(CLI::IsMember({"dense", "compressed"}));
  app.add_option("--export-dtype", cfg.export_dtype,
                 "Values in --export: fp32 (the default) or bf16 (each rounded to the nearest bfloat16, ties to even)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--import", cfg.import_file,
                 "Start from this safetensors file's weights (same shapes; not with --resume); prints the validation "
                 "loss right after it");
  app.add_option("--prune-attn", cfg.prune_attn,
                 "With --import: prune qkv and proj by magnitude to this sparsity (sets the attention's sparsity)")
      ->check(examples::in_range(0.0, 0.9999));
  app.add_option("--prune-ffn", cfg.prune_ffn,
                 "With --import: prune fc and fc_proj by magnitude to this sparsity (sets the FFN's sparsity)")
      ->check(examples::in_range(0.0, 0.9999));
  app.add_flag("--profile", cfg.profile,
               "Print where a training step's time goes, phase by phase (the model's own step; the same results)");
  app.add_flag("--eval-only", cfg.eval_only, "Train nothing: evaluate (then --dump-logits, --export, --sample)");
  app.add_option("--dump-logits", cfg.dump_logits,
                 "Write the logits of the first --batch validation windows to this safetensors file (tokens, logits)");
  app.add_option("--sample", cfg.sample_chars, "Characters to sample at the end (at most 1000000)")
      ->check(examples::in_range(0, 1e6))
      ->capture_default_str();
  app.add_option("--temperature", cfg.temperature, "Sampling temperature (0 = greedy)")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_option("--prompt", cfg.prompt, "Sampling prompt");
  app.add_flag("--sample-full-window", cfg.sample_full_window,
               "Sample by running the whole window for every token, without the key/value cache (same tokens; "
               "for comparison)");
  app.add_flag("--share-transposes", cfg.share_transposes,
               "One W^T for all the sparse projections, rebuilt for each one's backward: 6 (16-bit indices) or 8 "
               "bytes less per live weight, a few percent slower unstructured (the same results)");
  app.add_option("--index-bits", cfg.index_bits,
                 "Column index width of the sparse projections: 16 (inputs <= 32768), 32, or auto (16 where it "
                 "fits and the projections are unstructured, else 32; a resume keeps the checkpoint's)")
      ->check(CLI::IsMember({"auto", "16", "32"}))
      ->capture_default_str();
  app.add_option("--weight-blocks", cfg.weight_blocks,
                 "Sparse projections in dense RxC blocks: 1x4, 4x1, 4x4, 8x1, 8x8 or 16x1 (32-bit indices; DST on "
                 "the block grid)")
      ->check(CLI::IsMember({"1x4", "4x1", "4x4", "8x1", "8x8", "16x1"}));
  app.add_option("--init", cfg.init,
                 "Initialisation of the projections and the head: gpt2 (normal(0, 0.02), residual projections / "
                 "sqrt(2 layers), sparse ones scaled by 1/sqrt(density)) or kaiming (Kaiming-uniform, effective "
                 "fan-in; the default before 0.2.0)")
      ->check(CLI::IsMember({"kaiming", "gpt2"}))
      ->capture_default_str();
  app.add_option("--precision", cfg.precision,
                 "Products of the projections: fp32, or bf16 (bf16 weights and activations, float accumulation, "
                 "float master weights; the head and attention stay fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--distributed", cfg.distributed,
               "Data parallel over the MPI ranks of mpirun (automatic when launched with more than one rank)");
  examples::name_failures(app, "char_gpt");
  CLI11_PARSE(app, argc, argv);
  // What needs no data is checked before any is read.
  apply_config_defaults(cfg);
  if (cfg.resume && cfg.checkpoint_dir.empty()) throw sprig::ArgumentError("char_gpt: --resume needs --checkpoint DIR");
  check_model_file_options(cfg);
  if (cfg.d_model % cfg.heads != 0)
    throw sprig::ArgumentError("char_gpt: --d-model " + std::to_string(cfg.d_model) + " is not a multiple of --heads " +
                               std::to_string(cfg.heads));
  if (cfg.min_lr > cfg.lr)
    throw sprig::ArgumentError("char_gpt: --min-lr " + examples::detail::show(cfg.min_lr) + " is above --lr " +
                               examples::detail::show(cfg.lr));
  if (cfg.algorithm != "none" && cfg.attn_sparsity <= 0.0 && cfg.ffn_sparsity <= 0.0)
    throw sprig::ArgumentError("char_gpt: --algorithm " + cfg.algorithm +
                               " needs --attn-sparsity or --ffn-sparsity > 0");
  if (app.count("--initial-sparsity") > 0 && !prunes(cfg))
    throw sprig::ArgumentError(
        "char_gpt: --initial-sparsity is where gradual pruning starts: it needs --algorithm "
        "granet or gmp, not " +
        cfg.algorithm);
  if (prunes(cfg))
    for (const auto& [option, final_sparsity] : {std::pair<std::string, double>{"--attn-sparsity", cfg.attn_sparsity},
                                                 std::pair<std::string, double>{"--ffn-sparsity", cfg.ffn_sparsity}})
      if (final_sparsity > 0.0 && !(cfg.initial_sparsity > 0.0 && cfg.initial_sparsity <= final_sparsity))
        throw sprig::ArgumentError(
            "char_gpt: --algorithm " + cfg.algorithm + " prunes each sparse group from --initial-sparsity " +
            examples::detail::show(cfg.initial_sparsity) + " to its own: it must be above 0 and at most " + option +
            " " + examples::detail::show(final_sparsity));
  if (!cfg.weight_blocks.empty() && cfg.index_bits == "16")
    throw sprig::ArgumentError("char_gpt: --weight-blocks is built with --index-bits 32 only");
  if (!cfg.checkpoint_dir.empty())
    examples::require_writable_dir<sprig::ArgumentError>("char_gpt", "--checkpoint", cfg.checkpoint_dir);
  if (!cfg.csv.empty()) examples::require_writable_file<sprig::ArgumentError>("char_gpt", "--csv", cfg.csv);
  examples::Ranks processes(argc, argv, cfg.distributed, "char_gpt");
  ranks = &processes.comm();
  cfg.resumed = examples::resume_settings(cfg.resume, examples::checkpoint_state_file(cfg.checkpoint_dir));
  if (!cfg.weight_blocks.empty()) {
    using I = std::int32_t;
    using sprig::BlockSparseLinear;
    const std::string& b = cfg.weight_blocks;
    if (b == "1x4") return run<I, BlockSparseLinear<T, I, 1, 4>>(cfg);
    if (b == "4x1") return run<I, BlockSparseLinear<T, I, 4, 1>>(cfg);
    if (b == "4x4") return run<I, BlockSparseLinear<T, I, 4, 4>>(cfg);
    if (b == "8x1") return run<I, BlockSparseLinear<T, I, 8, 1>>(cfg);
    if (b == "8x8") return run<I, BlockSparseLinear<T, I, 8, 8>>(cfg);
    if (b == "16x1") return run<I, BlockSparseLinear<T, I, 16, 1>>(cfg);
    throw sprig::ArgumentError("char_gpt: --weight-blocks " + b + " is not a block shape it is built for");
  }
  const bool fits_16 = std::max(cfg.d_model, cfg.d_ff) <= 32768;
  const int bits = examples::resolve_index_bits("char_gpt", cfg.index_bits, fits_16, cfg.resumed);
  return bits == 16 ? run<std::int16_t>(cfg) : run<std::int32_t>(cfg);
}

}  // namespace

// Nothing escapes: every exception is reported and exits 1 (examples/guarded_main.hpp).
int main(int argc, char** argv) {
  return examples::guarded_main("char_gpt", [&] { return program(argc, argv); });
}
