# .ci/leg_common.sh — helpers sourced by every .ci/legs/*.sh (set `leg` before sourcing):
# say/fail print with the leg's name; install_missing installs the given Debian packages
# that are not installed yet (apt-get update only then), as root or through sudo;
# kernel_tests prints the kernel test names, one per line; build_tests configures a build
# directory with the caller's cmake_args and builds the caller's targets (through ccache
# where it is installed: cmake/SprigCcache.cmake);
# compile_command prints a test's compile command from compile_commands.json (fails if
# absent); run_tests runs the given test targets with ctest.
say() { printf '[%s leg] %s\n' "$leg" "$*"; }
fail() { say "FAILED: $*"; exit 1; }

install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    local sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    say "installing: ${missing[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    say "packages present: $*"
  fi
}

# The kernel tests, one per line: the rule is cmake/SprigKernelTests.cmake's, the one the
# CMake build uses to pick their optimisation level.
kernel_tests() {
  cmake -DSPRIG_SOURCE_DIR=. -P cmake/SprigKernelTests.cmake
}

# build_tests BUILD_DIR: configures with the caller's cmake_args array and builds the
# caller's targets array.
build_tests() {
  local build=$1
  mkdir -p "$build"
  say "configure: cmake ${cmake_args[*]}"
  cmake "${cmake_args[@]}" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; fail "configure"; }
  say "build: cmake --build $build --target ${targets[*]} -j 2"
  local t0=$SECONDS
  cmake --build "$build" --target "${targets[@]}" -j 2 || fail "build"
  say "build: $((SECONDS - t0)) s"
}

compile_command() {
  local build=$1 t=$2 cmd
  cmd=$(grep "\"command\".*tests/$t.cpp" "$build/compile_commands.json" || true)
  # (called as cmd=$(compile_command ...): the message goes to stderr, the exit ends the leg)
  [[ -n $cmd ]] || { say "FAILED: no compile command for $t in compile_commands.json" >&2; exit 1; }
  printf '%s\n' "$cmd"
}

run_tests() {
  local build=$1
  shift
  local regex
  regex="^($(IFS='|'; echo "$*")):"
  local t0=$SECONDS
  ctest --test-dir "$build" -R "$regex" --output-on-failure -j 2 || fail "ctest"
  say "tests: $((SECONDS - t0)) s"
}
