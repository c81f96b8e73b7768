# lib.sh — helpers shared by the shell tests (sourced, not run): `check NAME EXPR` records a failure
# without stopping, `one_error_line CMD...` requires exit 1 with exactly one stderr line "error: ..."
# (the message is left in LAST_ERR).
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
one_error_line() {
    local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
    [[ $rc -eq 1 && $(printf '%s\n' "$err" | wc -l) -eq 1 && $err == error:* ]] || { echo "  rc=$rc out=[$err]"; return 1; }
    LAST_ERR=$err
}
