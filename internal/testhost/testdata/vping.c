/*
 * vping: one ICMP echo to IP over an ICMP datagram socket, as iputils' ping
 * does without privileges (net.ipv4.ping_group_range, which vessel opens in
 * every container's netns). busybox's ping needs a raw socket, which an
 * unprivileged container's root may not open: its netns is the host's.
 *
 *   vping IP      exits 0 once the reply came, 1 after 5 s without one.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in dst = { .sin_family = AF_INET };
	struct icmphdr req = { .type = ICMP_ECHO };
	char buf[256];
	int s;

	if (argc != 2 || inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
		fprintf(stderr, "usage: vping IPV4\n");
		return 2;
	}
	s = socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
	if (s < 0) {
		perror("vping: socket");
		return 1;
	}
	req.un.echo.sequence = htons(1);
	if (sendto(s, &req, sizeof(req), 0, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		perror("vping: sendto");
		return 1;
	}
	for (;;) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		struct icmphdr *rep = (struct icmphdr *)buf;

		if (poll(&p, 1, 5000) <= 0) {
			fprintf(stderr, "vping: no reply from %s\n", argv[1]);
			return 1;
		}
		if (recv(s, buf, sizeof(buf), 0) >= (ssize_t)sizeof(*rep) && rep->type == ICMP_ECHOREPLY)
			return 0;
	}
}
