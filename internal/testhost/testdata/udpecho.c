/*
 * udpecho: service downtime seen by a client, for live-migration
 * measurements.
 *
 *   udpecho serve PORT READY
 *       binds 0.0.0.0:PORT, creates the file READY, and sends every
 *       datagram back to its sender: a process in the container must run
 *       for the client to get an answer.
 *   udpecho probe IP PORT
 *       sends a datagram to IP:PORT every millisecond (a periodic timer,
 *       so a late tick does not shift the next ones) and records the
 *       largest gap between two successive replies (CLOCK_MONOTONIC).
 *       Commands on standard input, one a line:
 *         r   starts a new measurement (largest gap, counts);
 *         q   prints "GAP_US SINCE_US SENT REPLIES": the largest gap in
 *             microseconds, the time since the last reply, and the
 *             datagrams sent and replies received, since the last r.
 *       It exits at the end of its input.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what)
{
	perror(what);
	return 1;
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int serve(const char *port, const char *ready)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = htons(atoi(port)) };
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return fail("socket");
	if (bind(fd, (struct sockaddr *)&any, sizeof(any)) < 0)
		return fail("bind");
	int r = open(ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (r < 0)
		return fail("create ready file");
	close(r);
	for (;;) {
		char buf[64];
		struct sockaddr_in from;
		socklen_t len = sizeof(from);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &len);
		if (n < 0)
			continue;
		sendto(fd, buf, n, 0, (struct sockaddr *)&from, len);
	}
}

static int probe(const char *ip, const char *port)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(atoi(port)) };
	if (inet_pton(AF_INET, ip, &dst.sin_addr) != 1) {
		fprintf(stderr, "udpecho: bad address %s\n", ip);
		return 2;
	}
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (s < 0)
		return fail("socket");
	/* connect: only the server's answers come in, and an ICMP error
	 * (no ARP answer, port closed) shows as a failed recv, not a stop. */
	if (connect(s, (struct sockaddr *)&dst, sizeof(dst)) < 0)
		return fail("connect");
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	if (tfd < 0)
		return fail("timerfd_create");
	struct itimerspec every = { .it_interval = { 0, 1000000 }, .it_value = { 0, 1000000 } };
	if (timerfd_settime(tfd, 0, &every, NULL) < 0)
		return fail("timerfd_settime");
	int64_t last = 0, gap = 0;
	uint64_t seq = 0, sent = 0, replies = 0;
	char line[64];
	size_t used = 0;
	for (;;) {
		struct pollfd p[3] = {
			{ .fd = tfd, .events = POLLIN },
			{ .fd = s, .events = POLLIN },
			{ .fd = 0, .events = POLLIN },
		};
		if (poll(p, 3, -1) < 0)
			continue;
		if (p[0].revents & POLLIN) {
			uint64_t ticks;
			if (read(tfd, &ticks, sizeof(ticks)) == sizeof(ticks)) {
				seq++;
				if (send(s, &seq, sizeof(seq), 0) == sizeof(seq))
					sent++;
			}
		}
		if (p[1].revents & (POLLIN | POLLERR)) {
			char buf[64];
			while (recv(s, buf, sizeof(buf), 0) >= 0) {
				int64_t t = now_us();
				if (last && t - last > gap)
					gap = t - last;
				last = t;
				replies++;
			}
		}
		if (p[2].revents & (POLLIN | POLLHUP)) {
			ssize_t n = read(0, line + used, sizeof(line) - 1 - used);
			if (n <= 0)
				return 0;
			used += n;
			char *nl;
			while ((nl = memchr(line, '\n', used)) != NULL) {
				if (line[0] == 'r') {
					gap = 0;
					sent = replies = 0;
				} else if (line[0] == 'q') {
					int64_t since = last ? now_us() - last : -1;
					printf("%lld %lld %llu %llu\n", (long long)gap, (long long)since,
					       (unsigned long long)sent, (unsigned long long)replies);
					fflush(stdout);
				}
				used -= nl + 1 - line;
				memmove(line, nl + 1, used);
			}
			if (used == sizeof(line) - 1)
				used = 0;
		}
	}
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "serve") == 0)
		return serve(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "probe") == 0)
		return probe(argv[2], argv[3]);
	fprintf(stderr, "usage: udpecho serve PORT READY | udpecho probe IP PORT\n");
	return 2;
}
