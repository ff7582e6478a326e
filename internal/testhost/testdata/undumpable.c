/*
 * undumpable is a workload CRIU refuses to checkpoint: a child that
 * asked its parent to trace it (PTRACE_TRACEME) and stopped; the parent
 * never lets it go. CRIU cannot seize a task someone else already traces,
 * so any checkpoint of its container fails, with CRIU's reason in its log.
 * It writes /tmp/undumpable.ready once the child is stopped.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
	pid_t pid = fork();
	if (pid < 0) { perror("fork"); return 1; }
	if (pid == 0) {
		if (ptrace(PTRACE_TRACEME, 0, 0, 0) < 0) { perror("ptrace"); return 1; }
		raise(SIGSTOP);
		for (;;) pause();
	}
	int st;
	if (waitpid(pid, &st, WUNTRACED) < 0 || !WIFSTOPPED(st)) { perror("waitpid"); return 1; }
	FILE *f = fopen("/tmp/undumpable.ready", "w");
	if (f) { fputs("ready\n", f); fclose(f); }
	for (;;) pause();
}
