/* Host program: prints the layout of struct bloatd_sock as the C compiler
 * sees it, one "field offset" per line; daemon/src/probes/abi.rs compares. */
#include <stddef.h>
#include <stdio.h>
#include "bloatd.h"

#define F(f) printf(#f " %zu\n", offsetof(struct bloatd_sock, f))

int main(void)
{
	printf("size %zu\n", sizeof(struct bloatd_sock));
	F(cookie); F(update_ns); F(sample_ns); F(bytes_acked); F(bytes_received);
	F(ca_ops); F(netns); F(pid); F(cwnd); F(ssthresh); F(inflight); F(mss);
	F(srtt_us); F(min_rtt_us); F(rcv_rtt_us); F(rcv_min_rtt_us);
	F(total_retrans); F(lost); F(rate_delivered); F(rate_interval_us);
	F(family); F(sport); F(dport); F(state); F(ca_state); F(kind);
	F(saddr); F(daddr); F(comm); F(cc);
	return 0;
}
