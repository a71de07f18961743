// SPDX-License-Identifier: GPL-2.0
/*
 * Prints the size and every field offset of the structs in cc_state.h, as
 * the C compiler lays them out. build.rs runs it; src/state.rs compares the
 * output with the Rust mirror.
 */
#include <stddef.h>
#include <stdio.h>
#include "cc_state.h"

#define SIZE(s)		printf(#s " size %zu\n", sizeof(struct s))
#define FIELD(s, f)	printf(#s " " #f " %zu\n", offsetof(struct s, f))

int main(void)
{
	SIZE(bloatd_westwood_state);
	FIELD(bloatd_westwood_state, updated_us);
	FIELD(bloatd_westwood_state, bwe_bytes_per_s);
	FIELD(bloatd_westwood_state, bwe_first_stage_bytes_per_s);
	FIELD(bloatd_westwood_state, last_congestion_us);
	FIELD(bloatd_westwood_state, min_rtt_us);
	FIELD(bloatd_westwood_state, rtt_us);
	FIELD(bloatd_westwood_state, cwnd);
	FIELD(bloatd_westwood_state, ssthresh);
	FIELD(bloatd_westwood_state, mss);
	FIELD(bloatd_westwood_state, congestion_cwnd);
	FIELD(bloatd_westwood_state, recoveries);
	FIELD(bloatd_westwood_state, timeouts);

	SIZE(bloatd_cubic_state);
	FIELD(bloatd_cubic_state, updated_us);
	FIELD(bloatd_cubic_state, epoch_start_us);
	FIELD(bloatd_cubic_state, w_max);
	FIELD(bloatd_cubic_state, loss_cwnd);
	FIELD(bloatd_cubic_state, k_ms);
	FIELD(bloatd_cubic_state, epoch_cwnd);
	FIELD(bloatd_cubic_state, w_est);
	FIELD(bloatd_cubic_state, min_rtt_us);
	FIELD(bloatd_cubic_state, cwnd);
	FIELD(bloatd_cubic_state, ssthresh);
	FIELD(bloatd_cubic_state, mss);
	FIELD(bloatd_cubic_state, reductions);
	FIELD(bloatd_cubic_state, timeouts);
	FIELD(bloatd_cubic_state, hystart_round);
	FIELD(bloatd_cubic_state, hystart_found);
	FIELD(bloatd_cubic_state, hystart_exit_cwnd);
	return 0;
}
