# Sourced by the demo (scripts/demo.sh): use the running bloatd, or start
# one and remember to stop it. Needs BLOATD (the binary). lab.py applies the
# same rule in Python (bloatd_ensure there).

# Sets BLOATD_STARTED=1 when it started the daemon, 0 when one was running.
# Arguments go to `bloatd start` when it starts one.
bloatd_ensure() {
	local st=0
	"$BLOATD" status >/dev/null 2>&1 || st=$?
	case $st in
	0) BLOATD_STARTED=0 ;;
	3) "$BLOATD" start "$@" || return 1; BLOATD_STARTED=1 ;;
	*) echo "bloatd status failed (exit $st): see '$BLOATD status'" >&2; return 1 ;;
	esac
}

# Stops the daemon only if bloatd_ensure started it.
bloatd_release() {
	if ((${BLOATD_STARTED:-0})); then "$BLOATD" stop >/dev/null 2>&1 || true; fi
}
