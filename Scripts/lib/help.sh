# Sourced by the scripts in Scripts/: `-h` or `--help` anywhere among the arguments prints the
# script's header comment (what it does and its options) and exits, before any work starts.
print_help() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
for argument in "$@"; do
    case "$argument" in
        -h|--help) print_help; exit 0 ;;
    esac
done
unset argument
