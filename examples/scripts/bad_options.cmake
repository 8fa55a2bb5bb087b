# Runs the examples with bad options and requires each run to fail cleanly: within TIMEOUT
# seconds, with an exit code in 1..127 (not a signal: no abort, no core dump, no timeout), and a
# message on stderr that names the option (or matches the case's own expected text). Every
# numeric option gets a table of bad values for its kind (negative, zero, NaN, infinite, beyond
# a double, not a number, no value; integers also a fraction and a value beyond 64 bits); every
# option with a fixed set of values an unknown one; every path a missing or unwritable one;
# and the checks that need the data (char_gpt: prompt, block size) run before training. Last,
# SPRIG_EXAMPLES_TEST_THROW makes each program throw each kind of exception (sprig::Error,
# std::bad_alloc, another std::exception, a non-std one): main must report it, exit 1 and keep
# the output printed before it.
#
# cmake -DFASHION_MNIST=<exe> -DCHAR_GPT=<exe> -DDST_COMPARE=<exe> -DWORK=<dir> [-DTIMEOUT=s]
#       [-DFASHION_MNIST_DATA=ON] -P bad_options.cmake
# A program left empty is skipped (not built here). With FASHION_MNIST_DATA (the data set is
# installed) a diverging fashion_mnist run is tried too; char_gpt's text is in the tree.
cmake_minimum_required(VERSION 3.20)  # IN_LIST, string(REPEAT)
if(NOT TIMEOUT)
  set(TIMEOUT 10)
endif()
foreach(exe IN ITEMS FASHION_MNIST CHAR_GPT DST_COMPARE)  # the runs start in WORK
  if(${exe})
    get_filename_component(${exe} "${${exe}}" ABSOLUTE)
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(failures "")
set(runs 0)
string(REPEAT "[0-9]" 30 long_number)  # CLI11's own range messages print 300-digit bounds

# run(<exe> <expect regex> <args>...): one run that must fail cleanly.
function(run exe expect)
  execute_process(COMMAND "${exe}" ${ARGN} TIMEOUT ${TIMEOUT} WORKING_DIRECTORY "${WORK}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  math(EXPR n "${runs} + 1")
  set(runs ${n} PARENT_SCOPE)
  get_filename_component(name "${exe}" NAME)
  string(REPLACE ";" " " shown "${ARGN}")
  set(why "")
  if(NOT rc MATCHES "^[0-9]+$")
    set(why "did not exit normally (${rc})")
  elseif(rc EQUAL 0 OR rc GREATER 127)
    set(why "exit code ${rc}")
  elseif(err STREQUAL "")
    set(why "no message on stderr")
  elseif(NOT err MATCHES "${expect}")
    set(why "stderr does not match '${expect}'")
  else()
    string(REGEX MATCHALL "(^|\n)${name}: [^\n]*" messages "${err}")  # not the progress lines
    if(messages MATCHES "${long_number}")
      set(why "the message holds a number of 30 or more digits")
    endif()
  endif()
  if(why)
    set(failures "${failures}\n${name} ${shown}: ${why}\n  stderr: ${err}" PARENT_SCOPE)
  endif()
endfunction()

# bad_numbers(<exe> <option> <kind> [int]): the bad values of a numeric option. kind: pos (> 0),
# nonneg (>= 0), or range ABOVE for [0, HI] with ABOVE just past HI. Each run's stderr names
# the option.
function(bad_numbers exe option kind)
  set(values nan inf -inf 1e400 abc)
  if(kind STREQUAL "pos")
    list(APPEND values -1 0)
  elseif(kind STREQUAL "nonneg")
    list(APPEND values -1)
  else()  # range ABOVE: [0, HI], ABOVE the first value past HI
    list(GET ARGN 0 above)
    list(APPEND values -0.5 ${above})
  endif()
  if("int" IN_LIST ARGN)
    list(APPEND values 1.5 99999999999999999999)
  endif()
  set(pattern "${option}")
  foreach(v IN LISTS values)
    run("${exe}" "${pattern}" "${option}=${v}")
  endforeach()
  run("${exe}" "${pattern}" "${option}")  # no value
  set(runs ${runs} PARENT_SCOPE)
  set(failures "${failures}" PARENT_SCOPE)
endfunction()

# throws(<exe>): each kind of exception, thrown inside main's guard, is reported with exit 1.
function(throws exe)
  get_filename_component(name "${exe}" NAME)
  foreach(kind_expect "sprig|${name}: a sprig::Error thrown" "bad_alloc|${name}: out of memory: an allocation was too large"
                      "std|${name}: a std::logic_error thrown" "unknown|${name}: unknown exception")
    string(REPLACE "|" ";" ke "${kind_expect}")
    list(GET ke 0 kind)
    list(GET ke 1 expect)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env SPRIG_EXAMPLES_TEST_THROW=${kind} "${exe}" TIMEOUT ${TIMEOUT}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    math(EXPR n "${runs} + 1")
    set(runs ${n})
    if(NOT rc STREQUAL "1" OR NOT err MATCHES "${expect}" OR NOT out MATCHES "test throw: ${kind}\n")
      set(failures "${failures}\n${name} with SPRIG_EXAMPLES_TEST_THROW=${kind}: exit ${rc}, want 1 and '${expect}' on stderr, 'test throw: ${kind}' on stdout\n  stdout: ${out}\n  stderr: ${err}")
    endif()
  endforeach()
  set(runs ${runs} PARENT_SCOPE)
  set(failures "${failures}" PARENT_SCOPE)
endfunction()

if(FASHION_MNIST)
  set(e "${FASHION_MNIST}")
  bad_numbers("${e}" --sparsity range 1)
  bad_numbers("${e}" --initial-sparsity range 1)
  bad_numbers("${e}" --widths pos int)
  bad_numbers("${e}" --epochs pos int)
  bad_numbers("${e}" --batch pos int)
  bad_numbers("${e}" --lr pos)
  bad_numbers("${e}" --weight-decay nonneg)
  bad_numbers("${e}" --momentum range 1)
  bad_numbers("${e}" --warmup-epochs range 101)
  bad_numbers("${e}" --seed nonneg int)
  bad_numbers("${e}" --threads range 1025 int)
  bad_numbers("${e}" --checkpoint-every nonneg int)
  bad_numbers("${e}" --stop-after-steps nonneg int)
  bad_numbers("${e}" --delta-t pos int)
  bad_numbers("${e}" --alpha range 1.01)
  bad_numbers("${e}" --compare-steps nonneg int)
  bad_numbers("${e}" --max-steps nonneg int)
  run("${e}" "--widths" --widths 64,-3)
  run("${e}" "--index-bits" --index-bits 8)
  run("${e}" "--index-bits" --index-bits nan)
  run("${e}" "--optimizer" --optimizer adam)
  run("${e}" "--distribution" --distribution normal)
  run("${e}" "--bias-correction" --bias-correction none)
  run("${e}" "--algorithm" --algorithm magic)
  run("${e}" "--block" --block 3x3)
  run("${e}" "unknown-option|not expected|extras" --unknown-option 1)
  run("${e}" "load_fashion_mnist: neither '/nonexistent" --data-dir /nonexistent)
  run("${e}" "--checkpoint /dev/null/x: cannot create the directory" --checkpoint /dev/null/x)
  run("${e}" "--csv /dev/null/x.csv: cannot write" --csv /dev/null/x.csv)
  run("${e}" "--resume needs --checkpoint" --resume)
  run("${e}" "--block is built with --index-bits 32 only" --block 4x4 --index-bits 16)
  run("${e}" "--precision" --precision fp16)
  run("${e}" "--algorithm rigl needs --sparsity > 0" --algorithm rigl --sparsity 0)
  run("${e}" "--initial-sparsity is where gradual pruning starts: it needs --algorithm granet or gmp, not set"
      --algorithm set --initial-sparsity 0.5)
  if(FASHION_MNIST_DATA)  # divergence is an error (needs the data set)
    run("${e}" "the run diverged: the training loss is -?(nan|inf) at step [0-9]+" --epochs 1 --max-steps 60 --lr 1e6 --threads 1)
    # what sizes memory is bounded, checked before the model is built
    run("${e}" "--batch 70000 is larger than the 60000 training images" --batch 70000)
    run("${e}" "--widths 100000000,100000000 --batch 128 needs at least [0-9.]+ GB \\(weights, gradients and optimizer state [0-9.]+ GB, activations"
        --widths 100000000,100000000)
  endif()
  throws("${e}")
endif()

if(CHAR_GPT)
  set(e "${CHAR_GPT}")
  bad_numbers("${e}" --attn-sparsity range 1)
  bad_numbers("${e}" --ffn-sparsity range 1)
  bad_numbers("${e}" --delta-t pos int)
  bad_numbers("${e}" --alpha range 1.01)
  bad_numbers("${e}" --steps pos int)
  bad_numbers("${e}" --batch pos int)
  bad_numbers("${e}" --block pos int)
  bad_numbers("${e}" --layers pos int)
  bad_numbers("${e}" --heads pos int)
  bad_numbers("${e}" --d-model pos int)
  bad_numbers("${e}" --d-ff pos int)
  bad_numbers("${e}" --lr pos)
  bad_numbers("${e}" --min-lr nonneg)
  bad_numbers("${e}" --warmup nonneg int)
  bad_numbers("${e}" --weight-decay nonneg)
  bad_numbers("${e}" --clip pos)
  bad_numbers("${e}" --seed nonneg int)
  bad_numbers("${e}" --threads range 1025 int)
  bad_numbers("${e}" --eval-every nonneg int)
  bad_numbers("${e}" --eval-windows pos int)
  bad_numbers("${e}" --checkpoint-every nonneg int)
  bad_numbers("${e}" --stop-after-steps nonneg int)
  bad_numbers("${e}" --sample range 1000001 int)
  bad_numbers("${e}" --temperature nonneg)
  run("${e}" "--index-bits" --index-bits 8)
  run("${e}" "--config" --config huge)
  run("${e}" "--distribution" --distribution normal)
  run("${e}" "--bias-correction" --bias-correction none)
  run("${e}" "--algorithm" --algorithm magic)
  run("${e}" "--weight-blocks" --weight-blocks 3x3)
  run("${e}" "unknown-option|not expected|extras" --unknown-option 1)
  run("${e}" "cannot open '/nonexistent/text.txt'" --data /nonexistent/text.txt)
  run("${e}" "--checkpoint /dev/null/x: cannot create the directory" --checkpoint /dev/null/x)
  run("${e}" "--csv /dev/null/x.csv: cannot write" --csv /dev/null/x.csv)
  run("${e}" "--resume needs --checkpoint" --resume)
  run("${e}" "--weight-blocks is built with --index-bits 32 only" --weight-blocks 4x4 --index-bits 16)
  run("${e}" "--algorithm rigl needs --attn-sparsity or --ffn-sparsity > 0" --algorithm rigl)
  # gradual pruning (granet, gmp) starts at --initial-sparsity, in (0, each sparse group's own]
  bad_numbers("${e}" --initial-sparsity range 1)
  run("${e}" "--initial-sparsity is where gradual pruning starts: it needs --algorithm granet or gmp, not rigl"
      --algorithm rigl --ffn-sparsity 0.9 --initial-sparsity 0.5)
  run("${e}" "--algorithm gmp prunes each sparse group from --initial-sparsity 0.95 to its own: it must be above 0 and at most --ffn-sparsity 0.9"
      --algorithm gmp --ffn-sparsity 0.9 --initial-sparsity 0.95)
  run("${e}" "--algorithm granet prunes each sparse group from --initial-sparsity 0 to its own: it must be above 0 and at most --attn-sparsity 0.5"
      --algorithm granet --attn-sparsity 0.5 --initial-sparsity 0)
  # ERK makes both proj dense at 5% attention sparsity (proj's share is 3/2 of qkv's), not at 50%
  run("${e}" "--distribution erk makes 2 projection\\(s\\) dense at --initial-sparsity 0.05 that are sparse at the final sparsities"
      --algorithm granet --distribution erk --attn-sparsity 0.5 --initial-sparsity 0.05 --layers 2 --heads 2 --d-model 32
      --d-ff 64 --block 32 --batch 4 --eval-windows 8)
  run("${e}" "--d-model 256 is not a multiple of --heads 3" --heads 3)
  run("${e}" "--min-lr 0.01 is above --lr 0.001" --min-lr 0.01)
  # models in and out (without nlohmann-json every one is refused, naming the options)
  bad_numbers("${e}" --prune-attn range 1)
  bad_numbers("${e}" --prune-ffn range 1)
  run("${e}" "--export-form" --export x.safetensors --export-form sparse)
  run("${e}" "--export-form compressed needs --export FILE|need nlohmann-json" --export-form compressed)
  run("${e}" "--export-dtype bf16 needs --export FILE|need nlohmann-json" --export-dtype bf16)
  run("${e}" "--export-dtype" --export x.safetensors --export-dtype f16)
  run("${e}" "--precision" --precision fp16)
  run("${e}" "--init: normal not in" --init normal)
  run("${e}" "--import /nonexistent/m.safetensors: no such file|need nlohmann-json" --import /nonexistent/m.safetensors)
  run("${e}" "--import /: a directory|need nlohmann-json" --import /)
  run("${e}" "--export /dev/null/m.safetensors: cannot write|need nlohmann-json" --export /dev/null/m.safetensors)
  run("${e}" "--dump-logits /: a directory|need nlohmann-json" --dump-logits /)
  run("${e}" "--prune-attn and --prune-ffn prune an imported model: they need --import" --prune-ffn 0.9)
  file(WRITE "${WORK}/m.safetensors" "")
  run("${e}" "--import and --resume conflict|need nlohmann-json" --import m.safetensors --checkpoint ckpt --resume)
  run("${e}" "--prune-attn/--prune-ffn and --attn-sparsity/--ffn-sparsity conflict|need nlohmann-json"
      --import m.safetensors --prune-attn 0.7 --ffn-sparsity 0.9)
  run("${e}" "not with --weight-blocks|need nlohmann-json" --import m.safetensors --prune-ffn 0.9 --weight-blocks 4x4)
  run("${e}" "m.safetensors.*(shorter|length)|need nlohmann-json" --import m.safetensors)
  # checks against the data, before the model is built
  run("${e}" "--block 2000000 is too long for" --block 2000000)
  run("${e}" "--prompt: character 1 \\(byte 64\\) does not occur in" --prompt "a@")
  # what sizes memory is bounded (the machine's memory named), before the model is built
  run("${e}" "--batch 16 --block 100000 needs at least [0-9.]+ GB \\(.*attention probabilities [0-9.]+ GB.*this machine has [0-9.]+ GB of memory"
      --block 100000)
  run("${e}" "--d-model 1000000 --d-ff 1024 --batch 16 --block 128 needs at least [0-9.]+ GB \\(weights, gradients and AdamW state"
      --d-model 1000000 --heads 1)
  run("${e}" "--eval-windows 1000000000: the validation split of .* has [0-9]+ distinct windows of --block 128" --eval-windows 1000000000)
  # divergence is an error (a tiny model, the text in the tree)
  run("${e}" "the run diverged: the training loss is -?(nan|inf) at step [0-9]+" --layers 1 --heads 2 --d-model 16 --d-ff 32
      --block 16 --batch 4 --eval-windows 4 --threads 1 --steps 40 --warmup 0 --lr 1e6)
  throws("${e}")
endif()

if(DST_COMPARE)
  set(e "${DST_COMPARE}")
  bad_numbers("${e}" --sparsities range 1)
  bad_numbers("${e}" --seeds pos int)
  bad_numbers("${e}" --epochs pos int)
  run("${e}" "--sparsities" --sparsities 0.9,1.5)
  run("${e}" "--algorithms" --algorithms rigl,magic)
  run("${e}" "--algorithms" --algorithms none)
  run("${e}" "--fashion-mnist /nonexistent/fashion_mnist: no such executable" --fashion-mnist /nonexistent/fashion_mnist)
  run("${e}" "--out /dev/null/x: cannot create the directory" --out /dev/null/x)
  throws("${e}")
endif()

if(failures)
  message(FATAL_ERROR "${runs} runs; these did not fail cleanly:${failures}")
endif()
message(STATUS "${runs} runs with bad options or forced exceptions, each failed cleanly")
