/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The receiver's RTT from the TCP timestamps the sender echoes: each
 * sample (rcv_ts_rtt_us, measure_rcv_rtt) and the clock it is read
 * against. Shared by probes.bpf.c (each data segment a receiver takes) and
 * DRWA (policy_ops.h).
 */
#ifndef BLOATD_RCV_RTT_H
#define BLOATD_RCV_RTT_H

#include <bpf/bpf_endian.h>
#include "probes_state.h"

/*
 * A receiver's RTT from the timestamps the sender echoes on its data (TSecr
 * against our own TSval clock), as ePPing and the kernel's
 * tcp_rcv_rtt_measure_ts do. The kernel's own estimate (rcv_rtt_est) serves
 * receive-buffer autotuning: it takes any lower sample at once and ignores
 * higher ones while the application has unread data, so it under-reports a
 * queue.
 *
 * Each sample is the segment under the probe, whole: the echo its own
 * header carries (tcp_probe runs before the stack parses it) against the
 * time it arrived (the clock, read once the echo is known to be new). It
 * asks nothing of the record, so a random look (sampler.h) measures a
 * segment exactly as exact mode does, and the statistics of the two modes
 * differ only in which segments they look at. (Read from the previous
 * segment's parse, rx_opt, against the stack's last clock refresh, as
 * first built, the sample needed the record's previous look to bound when
 * that segment was processed: seconds before a random look, so no look
 * ever measured, and a cold receiver kept a stale RTT for the rest of its
 * life, or none.)
 *
 * Two rules keep the samples that measure the path:
 * - Each echo once: later segments of a burst echo the same value and
 *   would add the sender's own pacing; the segment counts only when its
 *   echo differs from the previous segment's (rx_opt.rcv_tsecr, already
 *   less tsoffset), as in the kernel.
 * - The sender was sending: it sent this segment within a quarter of the
 *   sample after the one before (its TSval clock: rx_opt.rcv_tsval). An
 *   application-limited sender echoes the last ACK it got before it had
 *   more to send, a sample as long as its pause: 100 ms between the
 *   messages of a chatty client read as 100 ms of queue on loopback, and a
 *   Prometheus scrape's request, a second after the last response, as a
 *   second. Its TSval moved by the pause. A peer's tick is taken as 1 ms
 *   (Linux, and the RFC's lower bound) unless both ends agreed on
 *   microseconds: a coarser clock passes more, never fewer.
 * The interval's RTT is the lowest of its samples (sock_interval): what
 * still passes can only be longer than the path, never shorter.
 */
/* Whether the connection agreed on microsecond TCP timestamps (Linux 6.7,
 * tcp_usec_ts). Before 6.7 the field does not exist and every connection
 * stamps with the millisecond clock: the existence check makes the read
 * dead code the verifier never sees there. */
static __always_inline int tcp_usec_ts(const struct tcp_sock *tp)
{
	if (!bpf_core_field_exists(tp->tcp_usec_ts))
		return 0;
	return BPF_CORE_READ_BITFIELD_PROBED(tp, tcp_usec_ts);
}

/* A timestamp difference in clock ticks of `tick_us` as an RTT sample:
 * bounded in ticks first, then converted, so an echo older than the bound
 * is refused whatever its age. (Multiplied first, a millisecond difference
 * wraps 32 bits past ~71.6 minutes, and 1.4% of such echoes land in the
 * accepted range: an hour-old echo read as a few milliseconds.) 0: none. */
static __always_inline __u32 rcv_ts_rtt_bound(__u32 ticks, __u32 tick_us)
{
	if ((__s32)ticks <= 0 || ticks > RCV_TS_RTT_MAX_US / tick_us)
		return 0;
	return ticks * tick_us;
}

/* An echo `tsecr` (less tsoffset) against our TCP clock at `now_us`
 * (0: no usable sample). */
static __always_inline __u32 rcv_ts_rtt_at(const struct tcp_sock *tp, __u32 tsecr, __u64 now_us)
{
	__u32 now_ts;

	if (tcp_usec_ts(tp))
		return rcv_ts_rtt_bound((__u32)now_us - tsecr, 1);
	now_ts = now_us / 1000;
	/* Millisecond clock: a sub-millisecond RTT reads 0. */
	if (now_ts == tsecr)
		return 500;
	return rcv_ts_rtt_bound(now_ts - tsecr, 1000);
}

/* One receiver RTT sample: the TCP clock of the last segment processed
 * against the timestamp it echoed (0: no usable sample). */
static __always_inline __u32 rcv_ts_rtt_us(const struct tcp_sock *tp, __u32 tsecr)
{
	return rcv_ts_rtt_at(tp, tsecr, tp->tcp_mstamp);
}

/* The timestamps of the segment under the probe, from its header (data at
 * the TCP header in tcp_rcv_established): the option where Linux and
 * RFC 7323's appendix A put it, first and aligned (NOP, NOP, kind 8,
 * length 10). 0: not there. */
static __always_inline int seg_timestamps(const struct sk_buff *skb, __u32 *tsval, __u32 *tsecr)
{
	__u32 w[5];	/* header bytes 12-31: data offset, flags, window, ..., the option */

	if (bpf_probe_read_kernel(w, sizeof(w), skb->data + 12))
		return 0;
	if ((w[0] & 0xff) >> 4 < 8 || w[2] != bpf_htonl(0x0101080a))
		return 0;
	*tsval = bpf_ntohl(w[3]);
	*tsecr = bpf_ntohl(w[4]);
	return 1;
}

static __always_inline void measure_rcv_rtt(struct bloatd_sock *s, const struct tcp_sock *tp,
					    const struct sk_buff *skb)
{
	__u32 tsval, tsecr, rtt_us, ticks;
	__u64 gap_us;

	if (!seg_timestamps(skb, &tsval, &tsecr) || !tsecr)
		return;
	tsecr -= tp->tsoffset;
	if (tsecr == tp->rx_opt.rcv_tsecr)
		return;
	ticks = tsval - tp->rx_opt.rcv_tsval;
	if ((__s32)ticks < 0)
		return;	/* reordered: it echoes an older ACK */
	rtt_us = rcv_ts_rtt_at(tp, tsecr, bpf_ktime_get_ns() / 1000);
	gap_us = (__u64)ticks * (tcp_usec_ts(tp) ? 1 : 1000);
	if (!rtt_us || gap_us * 4 > rtt_us)
		return;
	if (!s->rcv_ts_min_us || rtt_us < s->rcv_ts_min_us)
		s->rcv_ts_min_us = rtt_us;
}

#endif /* BLOATD_RCV_RTT_H */
