# Models in and out of char_gpt (EXE, arguments ARGS of a dense tiny model without its
# --layers, --d-model and --d-ff, which this script sets, directory WORK):
#  1. a dense run with --export writes the file, and RESULT's export_bytes is its size;
#  2. --import of it with --eval-only gives back the exporting run's validation loss (the
#     weights came back), and with --prune-attn/--prune-ffn a run starts from it pruned, prints
#     the loss right after pruning (other than the dense one) and exports the compressed form,
#     smaller than the dense file;
#     --algorithm gmp prunes such an import gradually, from --initial-sparsity to --prune-ffn;
#  3. --import of the compressed file into a model of the same sparsities restores the pruned
#     run's validation loss;
#  4. errors: a model of other shapes (the tensor named, the run refused before training), a file
#     trained on another alphabet, a file that is not safetensors.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(shape --layers 2 --d-model 32 --d-ff 64)

# run(<out> <args>...): one run that must exit 0; its stdout in <out>.
function(run out)
  execute_process(COMMAND "${EXE}" ${ARGS} ${shape} ${ARGN} OUTPUT_VARIABLE text ERROR_VARIABLE err
                  RESULT_VARIABLE rc TIMEOUT 120)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " shown "${ARGN}")
    message(FATAL_ERROR "run ${shown} failed (${rc}):\n${text}\n${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# fails(<expect regex> <args>...): one run (its shape in args) that must fail with a message
# matching the regex, before any training step.
function(fails expect)
  execute_process(COMMAND "${EXE}" ${ARGS} ${ARGN} OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc
                  TIMEOUT 120)
  string(REPLACE ";" " " shown "${ARGN}")
  if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 0 OR rc GREATER 127 OR NOT err MATCHES "${expect}")
    message(FATAL_ERROR "run ${shown} should fail with '${expect}'; exit ${rc}:\n${text}\n${err}")
  endif()
  if(text MATCHES "step [0-9]+: train loss")
    message(FATAL_ERROR "run ${shown} trained before it failed:\n${text}")
  endif()
endfunction()

# match(<out> <regex> <text> <what>): the first group of regex in text, or a failure.
function(match out regex text what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: no match for '${regex}' in:\n${text}")
  endif()
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# 1. dense export
set(dense "${WORK}/dense.safetensors")
run(out --steps 8 --eval-every 0 --export "${dense}")
match(dense_loss "RESULT val_loss=([0-9.]+) " "${out}" "dense run")
match(dense_bytes "export_bytes=([0-9]+)" "${out}" "dense run")
file(SIZE "${dense}" size)
if(NOT size EQUAL dense_bytes OR size LESS 1000)
  message(FATAL_ERROR "export_bytes=${dense_bytes} but ${dense} holds ${size} bytes")
endif()

# 2. import: the same loss back; pruned, another loss, then a compressed export
run(out --eval-only --import "${dense}")
match(back "val loss ([0-9.]+) right after the import\n" "${out}" "dense import")
if(NOT back STREQUAL dense_loss)
  message(FATAL_ERROR "the imported model's val loss ${back} is not the exporting run's ${dense_loss}")
endif()
set(sparse "${WORK}/sparse.safetensors")
run(out --import "${dense}" --prune-attn 0.5 --prune-ffn 0.8 --steps 4 --eval-every 0 --export "${sparse}"
    --export-form compressed)
match(pruned_loss "val loss ([0-9.]+) right after the import and pruning" "${out}" "pruned import")
if(pruned_loss STREQUAL dense_loss)
  message(FATAL_ERROR "pruning 50% / 80% of the projections left the val loss at ${dense_loss}")
endif()
match(sparse_loss "RESULT val_loss=([0-9.]+) " "${out}" "pruned run")
match(sparse_bytes "export_bytes=([0-9]+)" "${out}" "pruned run")
if(NOT out MATCHES "attention 50% sparse, FFN 80% sparse" OR NOT out MATCHES "compressed sparse-bitmask")
  message(FATAL_ERROR "the pruned run names no sparsities or form:\n${out}")
endif()
if(NOT sparse_bytes LESS dense_bytes)
  message(FATAL_ERROR "the compressed export (${sparse_bytes} bytes) is not smaller than the dense (${dense_bytes})")
endif()

# 2b. gradual pruning of the import: one-shot to --initial-sparsity, then gmp to --prune-ffn
# (updates at steps 0 and 2 of 4): fc and fc_proj end at live_count(2048, 0.9) = 205 weights
# each, 1 - 410/4096 = 89.9902% sparse; its loss after the one-shot pruning is not 80%'s
run(out --import "${dense}" --prune-ffn 0.9 --algorithm gmp --initial-sparsity 0.5 --delta-t 2 --steps 4 --eval-every 0)
match(gradual_loss "val loss ([0-9.]+) right after the import and pruning" "${out}" "gradually pruned import")
if(gradual_loss STREQUAL pruned_loss OR gradual_loss STREQUAL dense_loss)
  message(FATAL_ERROR "pruning the FFN to 50% gave the val loss of the dense or the 50% / 80% model:\n${out}")
endif()
if(NOT out MATCHES "pruned by magnitude to --initial-sparsity \\(one-shot\\), then gradually"
   OR NOT out MATCHES "\nsparsity now: attention dense, FFN 89.9902%\n")
  message(FATAL_ERROR "the gradually pruned import did not end at the FFN's 90%:\n${out}")
endif()

# 3. the compressed file into a sparse model: its pattern and values back
run(out --eval-only --import "${sparse}" --attn-sparsity 0.5 --ffn-sparsity 0.8)
match(back "val loss ([0-9.]+) right after the import\n" "${out}" "compressed import")
if(NOT back STREQUAL sparse_loss)
  message(FATAL_ERROR "the compressed file's val loss ${back} is not the exporting run's ${sparse_loss}")
endif()

# 4. errors
fails("tensor 'tok_emb.weight' has shape \\[65,32\\], the model's parameter is \\[65,64\\]"
      --import "${dense}" --layers 2 --d-model 64 --d-ff 64)
fails("tensor 'blocks.0.fc.weight' has shape \\[64,32\\], the model's parameter is \\[96,32\\]" --import "${dense}"
      --layers 2 --d-model 32 --d-ff 96)
fails("tensor 'blocks\\.1\\.[a-z_.]+' matches no parameter of the model"
      --import "${dense}" --layers 1 --d-model 32 --d-ff 64)
string(REPEAT "abcab cab\nbca abc\n" 400 other)
file(WRITE "${WORK}/other.txt" "${other}")
fails("--import .* was trained on another alphabet \\(\\[.*\\]\\) than --data .*other.txt's \\(\\[10,32,97,98,99\\]\\)"
      --import "${dense}" --data "${WORK}/other.txt" --eval-only ${shape})
file(WRITE "${WORK}/garbage.safetensors" "not a safetensors file at all")
fails("garbage.safetensors" --import "${WORK}/garbage.safetensors" ${shape})
message(STATUS "export ${dense_bytes} bytes, compressed ${sparse_bytes}; val loss ${dense_loss} back after import, "
               "${pruned_loss} after pruning, ${sparse_loss} after 4 steps and back from the compressed file")
