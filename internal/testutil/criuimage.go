package testutil

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/magic"
	"google.golang.org/protobuf/proto"
)

// WriteCRIUImage writes a CRIU image file: the common magic, the magic of
// kind (e.g. "INVENTORY", "IDS", "USERNS"), then each message after its
// size. Required fields may be left out: tests forge only what they need.
func WriteCRIUImage(t testing.TB, path, kind string, msgs ...proto.Message) {
	t.Helper()
	mm := magic.LoadMagic()
	b := binary.LittleEndian.AppendUint32(nil, uint32(mm.ByName["IMG_COMMON"]))
	b = binary.LittleEndian.AppendUint32(b, uint32(mm.ByName[kind]))
	for _, m := range msgs {
		p, err := proto.MarshalOptions{AllowPartial: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
