# Sourced by the scripts in Scripts/: `-h` or `--help` anywhere among the arguments prints the
# script's header comment (what it does and its options) and exits, before any work starts.
print_help() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }
for argument in "$@"; do
    case "$argument" in
        -h|--help) print_help; exit 0 ;;
    esac
done
unset argument

# seconds_of OPTION VALUE: VALUE — a duration with a unit (500ms, 20s, 5m, 1h) or a plain number of
# seconds, as every duration option of Parley's tools takes — in seconds (a decimal when not
# whole); exits with a message naming OPTION when VALUE is not a duration.
seconds_of() {
    local option="$1" value="$2" number unit
    if [[ "$value" =~ ^([0-9]+(\.[0-9]+)?)(us|ms|s|m|h)?$ ]]; then
        number="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[3]:-s}"
        awk -v n="$number" -v u="$unit" 'BEGIN {
            f = (u == "us") ? 0.000001 : (u == "ms") ? 0.001 : (u == "m") ? 60 : (u == "h") ? 3600 : 1
            s = n * f; if (s == int(s)) printf "%d\n", s; else printf "%g\n", s }'
    else
        echo "$option '$value' is not a duration: a number and a unit (ms, s, m, h), e.g. 30s; a plain number is seconds" >&2
        exit 2
    fi
}
