// fashion_mnist — the main job: train an MLP whose hidden layers are truly sparse
// (PaddedCSR weights, sparse kernels; no dense matrix with a mask) on Fashion-MNIST.
//
//   fashion_mnist                                   # 784-1024-1024-10, hidden layers 90% sparse
//   fashion_mnist --sparsity 0                      # the same model dense (GEMM), for comparison
//   fashion_mnist --optimizer sgd --lr 0.05 --epochs 10 --csv curves.csv
//   fashion_mnist --algorithm rigl --sparsity 0.95   # dynamic sparse training (sprig/dst)
//   fashion_mnist --block 4x4                        # hidden layers in dense 4x4 blocks
//   mpirun -np 2 fashion_mnist --threads 1           # data-parallel over 2 ranks (sprig/dist)
//
// The hidden layers are SparseLinear at density 1 - sparsity (Kaiming init with the
// effective fan-in), the output layer is dense. --sparsity 0 builds every layer dense.
// --block RxC makes them BlockSparseLinear of R x C blocks at block density 1 - sparsity
// (32-bit indices; every --algorithm and --constant-fan-in work on the block grid; no
// --compare-steps with blocks).
// Under an MPI launcher with more than one rank (or with --distributed) the run is data
// parallel: --batch is the global batch, each rank trains on its 1/N of its columns, gradients
// are averaged (dist::DataParallel), rank 0 prints and writes checkpoints, and the end of the
// run prints every rank's step time and communication. Needs a build with MPI (sprig::dist).
// Progress goes to stderr (a bar on a terminal, periodic lines otherwise); the results go
// to stdout, ending with one machine-readable line:
//   RESULT test_accuracy=<0..1> weight_bytes=<n> dense_weight_bytes=<n> ms_per_step=<x> topology_seconds=<x>
#include "fashion_mnist_run.hpp"

#include <CLI/CLI.hpp>

#include "cli_checks.hpp"
#include "guarded_main.hpp"

#include <cstdint>
#include <iostream>

using fashion_mnist::Config;
using fashion_mnist::run;
using fashion_mnist::T;

namespace {

int program(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train an MLP with truly sparse hidden layers on Fashion-MNIST"};
  app.add_option("--sparsity", cfg.sparsity, "Fraction of zero weights in the hidden layers (0 = dense)")
      ->check(examples::in_range(0.0, 0.9999))
      ->capture_default_str();
  app.add_option("--widths", cfg.widths, "Hidden layer widths (the step's memory must fit in RAM)")
      ->delimiter(',')
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Training epochs")->check(examples::positive())->capture_default_str();
  app.add_option("--batch", cfg.batch, "Mini-batch size (at most the 60000 training images)")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--optimizer", cfg.optimizer, "sgd (Nesterov momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  app.add_option("--lr", cfg.lr, "Peak learning rate (default: 4e-3 for adamw, 0.05 for sgd)")
      ->check(examples::positive());
  app.add_option("--weight-decay", cfg.weight_decay, "Weight decay (default: 1e-4 adamw, 5e-5 sgd)")
      ->check(examples::non_negative());
  app.add_option("--momentum", cfg.momentum, "SGD momentum")
      ->check(examples::in_range(0.0, 0.999))
      ->capture_default_str();
  app.add_option("--warmup-epochs", cfg.warmup_epochs, "Linear warmup before the cosine decay, in epochs")
      ->check(examples::in_range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "Seed of weights and batch order")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_option("--threads", cfg.threads,
                 "OpenMP threads, at most 1024 (0: 1 for a small model, else the cores not busy; examples/threads.hpp)")
      ->check(examples::threads_range())
      ->capture_default_str();
  app.add_option("--data-dir", cfg.data_dir, "Folder with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--csv", cfg.csv, "Write the per-epoch curves to this CSV file");
  app.add_option("--index-bits", cfg.index_bits,
                 "Column index width of the sparse layers: 16 (layer inputs <= 32768), 32, or auto (16 where it "
                 "fits and the layers are unstructured, else 32; a resume keeps the checkpoint's)")
      ->check(CLI::IsMember({"auto", "16", "32"}))
      ->capture_default_str();
  app.add_option("--checkpoint", cfg.checkpoint_dir, "Save the training state to DIR/state.sprig (atomically)");
  app.add_option("--checkpoint-every", cfg.checkpoint_every,
                 "Steps between checkpoints (0: only the one at the end of each epoch)")
      ->check(examples::non_negative())
      ->capture_default_str();
  app.add_flag(
      "--resume", cfg.resume,
      "Continue from DIR/state.sprig of --checkpoint if it exists. Every option that defines the model and the run "
      "must equal the checkpoint's (refused otherwise); these may change: --threads, --data-dir, --csv, "
      "--checkpoint-every, --stop-after-steps, --distributed");
  app.add_option("--stop-after-steps", cfg.stop_after_steps, "Exit after this many steps, as if killed (tests resume)")
      ->check(examples::non_negative());
  app.add_option("--distribution", cfg.distribution, "Layer densities from the global sparsity: uniform or erk")
      ->check(CLI::IsMember({"uniform", "erk"}))
      ->capture_default_str();
  app.add_option("--bias-correction", cfg.bias_correction,
                 "AdamW: correct a grown weight's moments with its own step count (per-slot) or the global one")
      ->check(CLI::IsMember({"per-slot", "global"}))
      ->capture_default_str();
  app.add_option("--algorithm", cfg.algorithm,
                 "Dynamic sparse training: none, static, set, rigl, snfs, granet (gradual pruning with regrowth) or gmp")
      ->check(CLI::IsMember({"none", "static", "set", "rigl", "snfs", "granet", "gmp"}))
      ->capture_default_str();
  app.add_option("--initial-sparsity", cfg.initial_sparsity,
                 "granet / gmp: the sparsity the model starts at, pruned to --sparsity by the cubic schedule")
      ->check(examples::in_range(0.0, 0.9999))
      ->capture_default_str();
  app.add_flag("--constant-fan-in", cfg.constant_fan_in,
               "Every output row keeps the same live count (drawn so, and kept through every update; not snfs)");
  app.add_option("--delta-t", cfg.delta_t, "Steps between topology updates")
      ->check(examples::positive())
      ->capture_default_str();
  app.add_option("--alpha", cfg.alpha, "Initial drop fraction of the topology updates")
      ->check(examples::in_range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--compare-steps", cfg.compare_steps,
                 "Instead of training: time this many steps of the dense and the sparse model, alternating")
      ->check(examples::non_negative());
  app.add_option("--block", cfg.block,
                 "Hidden layers in dense RxC blocks: 1x4, 4x1, 4x4, 8x1, 8x8 or 16x1 (32-bit indices)")
      ->check(CLI::IsMember({"1x4", "4x1", "4x4", "8x1", "8x8", "16x1"}));
  app.add_option("--precision", cfg.precision,
                 "Products of the hidden layers: fp32, or bf16 (bf16 weights and activations, float accumulation "
                 "and master weights; the output layer stays fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--distributed", cfg.distributed,
               "Data parallel over the MPI ranks of mpirun (automatic when launched with more than one rank)");
  app.add_option("--max-steps", cfg.max_steps, "Stop each epoch after this many steps (0 = full epochs)")
      ->check(examples::non_negative());
  examples::name_failures(app, "fashion_mnist");
  CLI11_PARSE(app, argc, argv);
  // What needs no data is checked before any is loaded.
  if (cfg.resume && cfg.checkpoint_dir.empty())
    throw sprig::ArgumentError("fashion_mnist: --resume needs --checkpoint DIR");
  if (cfg.algorithm != "none" && cfg.sparsity <= 0.0)
    throw sprig::ArgumentError("fashion_mnist: --algorithm " + cfg.algorithm + " needs --sparsity > 0");
  if (app.count("--initial-sparsity") > 0 && cfg.algorithm != "granet" && cfg.algorithm != "gmp")
    throw sprig::ArgumentError(
        "fashion_mnist: --initial-sparsity is where gradual pruning starts: it needs --algorithm granet or gmp, not " +
        cfg.algorithm);
  if (cfg.compare_steps > 0 && cfg.sparsity <= 0.0)
    throw sprig::ArgumentError("fashion_mnist: --compare-steps needs --sparsity > 0");
  if (!cfg.block.empty() && cfg.index_bits == "16")
    throw sprig::ArgumentError("fashion_mnist: --block is built with --index-bits 32 only");
  if (!cfg.checkpoint_dir.empty())
    examples::require_writable_dir<sprig::ArgumentError>("fashion_mnist", "--checkpoint", cfg.checkpoint_dir);
  if (!cfg.csv.empty()) examples::require_writable_file<sprig::ArgumentError>("fashion_mnist", "--csv", cfg.csv);
  examples::Ranks processes(argc, argv, cfg.distributed, "fashion_mnist");
  fashion_mnist::ranks = &processes.comm();
  cfg.resumed = examples::resume_settings(cfg.resume, examples::checkpoint_state_file(cfg.checkpoint_dir));
  if (!cfg.block.empty()) {
    using I = std::int32_t;
    if (cfg.block == "1x4") return run<I, sprig::BlockSparseLinear<T, I, 1, 4>>(cfg);
    if (cfg.block == "4x1") return run<I, sprig::BlockSparseLinear<T, I, 4, 1>>(cfg);
    if (cfg.block == "4x4") return run<I, sprig::BlockSparseLinear<T, I, 4, 4>>(cfg);
    if (cfg.block == "8x1") return run<I, sprig::BlockSparseLinear<T, I, 8, 1>>(cfg);
    if (cfg.block == "8x8") return run<I, sprig::BlockSparseLinear<T, I, 8, 8>>(cfg);
    return run<I, sprig::BlockSparseLinear<T, I, 16, 1>>(cfg);
  }
  std::int64_t widest_input = 784;  // the images' pixels, then each hidden layer's width
  for (const std::int64_t w : cfg.widths) widest_input = std::max(widest_input, w);
  const int bits = examples::resolve_index_bits("fashion_mnist", cfg.index_bits, widest_input <= 32768, cfg.resumed);
  return bits == 16 ? run<std::int16_t>(cfg) : run<std::int32_t>(cfg);
}

}  // namespace

// Nothing escapes: every exception is reported and exits 1 (examples/guarded_main.hpp).
int main(int argc, char** argv) {
  return examples::guarded_main("fashion_mnist", [&] { return program(argc, argv); });
}
