package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	gorunc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// criuService is a `criu swrk` process started ahead of its one request,
// with the directories the request names open for it (CRIU opens them as
// /proc/<our pid>/fd/N), and the descriptors it inherits (a lazy dump's
// page server socket). vessel speaks CRIU's RPC itself (go-criu's
// messages, our own process): go-criu's service cannot pass a descriptor
// to CRIU.
type criuService struct {
	cmd          *exec.Cmd
	sk           *os.File // our end of the RPC socket (SOCK_SEQPACKET)
	images, work *os.File
}

// criuServiceFd is the RPC socket's descriptor number in CRIU; the
// inherited descriptors follow it (criuInheritedFd...).
const (
	criuServiceFd   = 3
	criuInheritedFd = 4
)

// criuMaxResponse bounds one RPC response (a dump's answer is a few bytes).
const criuMaxResponse = 64 << 10

// startCriuService starts CRIU's RPC service for a dump into images, with
// its log in work; CRIU inherits the files of inherit as descriptors
// criuInheritedFd, criuInheritedFd+1, ...
func startCriuService(path, images, work string, inherit ...*os.File) (_ *criuService, err error) {
	s := &criuService{}
	defer func() {
		if err != nil {
			_ = s.close()
		}
	}()
	if s.images, err = os.Open(images); err != nil {
		return nil, err
	}
	if s.work, err = os.Open(work); err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start criu: %w", err)
	}
	s.sk = os.NewFile(uintptr(fds[0]), "criu-rpc")
	srv := os.NewFile(uintptr(fds[1]), "criu-rpc-service")
	defer srv.Close()
	cmd := exec.Command(path, "swrk", strconv.Itoa(criuServiceFd))
	cmd.ExtraFiles = append([]*os.File{srv}, inherit...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start criu: %w", err)
	}
	s.cmd = cmd
	// Only CRIU holds its end now: a CRIU that dies before it answers
	// hangs up.
	srv.Close()
	if err := criuReady(s.sk); err != nil {
		return nil, fmt.Errorf("start criu: %w", err)
	}
	return s, nil
}

// criuReady waits until a CRIU service started on sk reads requests: it
// asks for CRIU's version and keeps the service open for the real
// request. A worker takes several milliseconds to get there (its exec,
// the loader, the kernel probes it runs before its first request: patch
// 0028), which a caller that sends its request in a frozen window would
// otherwise wait for there.
func criuReady(sk *os.File) error {
	req, err := proto.Marshal(&rpc.CriuReq{Type: rpc.CriuReqType_VERSION.Enum(), KeepOpen: proto.Bool(true)})
	if err != nil {
		return err
	}
	_, err = criuExchange(sk, rpc.CriuReqType_VERSION, req)
	return err
}

// dumpCall sends the dump request and returns CRIU's answer; the caller
// closes the service.
func (s *criuService) dumpCall(opts *rpc.CriuOpts) error {
	opts.ImagesDirFd = proto.Int32(int32(s.images.Fd()))
	opts.WorkDirFd = proto.Int32(int32(s.work.Fd()))
	return s.call(rpc.CriuReqType_DUMP, opts)
}

// call sends one request and reads its response.
func (s *criuService) call(typ rpc.CriuReqType, opts *rpc.CriuOpts) error {
	_, err := criuCall(s.sk, typ, opts)
	return err
}

// criuCall sends one request on a CRIU RPC socket (a dump's service, a
// direct restore's) and reads CRIU's answer to it.
func criuCall(sk *os.File, typ rpc.CriuReqType, opts *rpc.CriuOpts) (*rpc.CriuResp, error) {
	req, err := proto.Marshal(&rpc.CriuReq{Type: typ.Enum(), Opts: opts})
	if err != nil {
		return nil, err
	}
	return criuExchange(sk, typ, req)
}

// criuExchange sends one marshalled request of type typ and reads CRIU's
// answer to it.
func criuExchange(sk *os.File, typ rpc.CriuReqType, req []byte) (*rpc.CriuResp, error) {
	if _, err := sk.Write(req); err != nil {
		return nil, fmt.Errorf("criu request: %w", err)
	}
	buf := make([]byte, criuMaxResponse)
	n, err := sk.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("criu response: %w", err)
	}
	var resp rpc.CriuResp
	if err := proto.Unmarshal(buf[:n], &resp); err != nil {
		return nil, fmt.Errorf("criu response: %w", err)
	}
	switch {
	case !resp.GetSuccess():
		return nil, &criuRequestError{msg: resp.GetCrErrmsg(), errno: resp.GetCrErrno()}
	case resp.GetType() != typ:
		return nil, fmt.Errorf("criu answered %s to %s", resp.GetType(), typ)
	}
	return &resp, nil
}

// close ends the service (a CRIU waiting for its request exits when its
// socket closes), waits for it, and closes the directories. Idempotent.
func (s *criuService) close() error {
	var err error
	if s.sk != nil {
		s.sk.Close()
		s.sk = nil
	}
	if s.cmd != nil {
		if werr := s.cmd.Wait(); werr != nil {
			err = fmt.Errorf("criu swrk failed: %w", werr)
		}
		s.cmd = nil
	}
	for _, f := range []**os.File{&s.images, &s.work} {
		if *f != nil {
			(*f).Close()
			*f = nil
		}
	}
	return err
}

// checkCheckpoint validates a checkpoint's options and creates its
// directories (the work path defaults to the image path).
func (r *Runtime) checkCheckpoint(id string, o *CheckpointOptions) error {
	if !validID(id) {
		return fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if r.cfg.Criu == "" {
		return fmt.Errorf("checkpoint %s: %w", id, ErrNoCRIU)
	}
	if !filepath.IsAbs(o.ImagePath) || (o.WorkPath != "" && !filepath.IsAbs(o.WorkPath)) {
		return fmt.Errorf("%w: checkpoint needs absolute image and work paths", ErrInvalid)
	}
	if o.WorkPath == "" {
		o.WorkPath = o.ImagePath
	}
	for _, d := range []string{o.ImagePath, o.WorkPath} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoint %s: %w", id, err)
		}
	}
	return nil
}

// runcCheckpoint dumps everything with `runc checkpoint` (options already
// checked). It runs without a context: killing runc would orphan its CRIU.
func (r *Runtime) runcCheckpoint(id string, o CheckpointOptions) error {
	opts := &gorunc.CheckpointOpts{
		ImagePath:    o.ImagePath,
		WorkDir:      o.WorkPath,
		AllowOpenTCP: o.TCPEstablished,
	}
	var actions []gorunc.CheckpointAction
	if o.LeaveRunning {
		actions = append(actions, gorunc.LeaveRunning)
	}
	if err := r.criuRunc().Checkpoint(r.criuEnv(context.Background()), id, opts, actions...); err != nil {
		err = runcError("checkpoint", id, err, ErrCheckpoint)
		return fmt.Errorf("%w%s", err, criuLogErrors(filepath.Join(o.WorkPath, "dump.log")))
	}
	return nil
}

// criuRunc is our runc client for checkpoints. runc 1.2 and later have no
// --criu flag: they run the "criu" of their PATH (see criuEnv; the shim
// puts Criu's directory first for restores).
func (r *Runtime) criuRunc() *gorunc.Runc {
	rc := *r.runc
	return &rc
}

// criuEnv returns ctx with the PATH runc is given: Criu's directory first,
// so runc runs our criu (e.g. /usr/lib/vessel/criu, which is in no PATH)
// and not a distribution's.
func (r *Runtime) criuEnv(ctx context.Context) context.Context {
	return gorunc.WithExtraEnv(ctx, "PATH="+criuPath(r.cfg.Criu, os.Getenv("PATH")))
}

// criuPath returns path with criu's directory put first.
func criuPath(criu, path string) string {
	if criu == "" {
		return path
	}
	if path == "" {
		return filepath.Dir(criu)
	}
	return filepath.Dir(criu) + string(os.PathListSeparator) + path
}
