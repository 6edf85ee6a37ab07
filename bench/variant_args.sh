# Sourced by the decode benchmarks' prepare steps: variant_args OPTS sets
# the array `args` to the strata-compile arguments of a variant's
# comma-separated options: NAME=VALUE is a codegen option (--codegen-opt),
# --FLAG=VALUE a strata-compile flag as written (e.g. --greedy-ids=off).
variant_args() {
  args=()
  local list o
  IFS=, read -ra list <<< "$1"
  for o in ${list[@]+"${list[@]}"}; do
    case $o in
      --*) args+=("$o") ;;
      ?*) args+=(--codegen-opt "$o") ;;
    esac
  done
}
