// Package imgstream moves checkpoint image files (CRIU's *.img) from CRIU
// to wherever they are kept, with vessel, not CRIU, doing the I/O of the
// bulk of the data: the memory pages.
//
// Vocabulary:
//
//   - Image file: one file CRIU writes on dump and reads on restore, named
//     like "pages-1.img" or "core-1.img". Page files ("pages-N.img") hold
//     the memory contents and are nearly all of the bytes; the others are
//     small.
//   - Images directory: the directory a dump writes its image files to.
//     SyncImages makes one durable once the dump is over.
//   - Sink: where a dump's page files go. A Sink receives each file as a
//     stream (Store) and reports success only once the file is durable.
//     DirSink writes into a directory with large aligned O_DIRECT writes,
//     several in flight; a network sink (live migration) can send them to
//     another host instead.
//   - Capture: the way vessel takes CRIU's page files while CRIU runs the
//     dump. The dump is driven over CRIU's RPC interface (see the runtime
//     package's Checkpoint session), where CRIU's own image streaming
//     ("stream" option) is not available (CRIU opens the images directory
//     with no dump/restore mode there and cannot pick a streamer socket).
//     So Capture puts a named pipe (FIFO) in the images directory under
//     each page file's name before the dump. CRIU opens it like a file
//     (O_WRONLY|O_CREAT|O_TRUNC does not replace a FIFO) and splices the
//     pages into it; Capture reads each FIFO and hands the stream to the
//     Sink. Files CRIU writes beyond the FIFOs prepared are ordinary files;
//     FIFOs CRIU never opened are removed.
//
// Restores are not streamed: CRIU reads its images directory itself, which
// measured faster than any read-ahead of ours in front of it.
//
// Nothing here depends on the daemon or on runc: the package is the I/O
// path, given a directory and a Sink.
package imgstream
