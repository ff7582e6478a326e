package security

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/userns"

	"github.com/vesselhost/vessel/internal/api"
	"github.com/vesselhost/vessel/internal/migration"
	"github.com/vesselhost/vessel/internal/testutil"
)

func u32p(v uint32) *uint32 { return &v }

// TestPeerHostileCheckpoint: a peer moving an unprivileged container in
// live sends a checkpoint whose tasks would restore as host root: left in
// the host's user namespace, or in one mapping host root. CRIU trusts its
// images, so the target checks them first: the move fails with a clear
// error before CRIU runs, and nothing is left.
func TestPeerHostileCheckpoint(t *testing.T) {
	h := newTarget(t)
	p := newFakePeer(t, h)
	// A block inside the target's subordinate ids (setup's root range),
	// which no container of this fresh host uses.
	const block = 15000 * 65536
	hostRoot := &userns.UsernsEntry{
		UidMap: []*userns.UidGidExtent{{First: u32p(0), LowerFirst: u32p(0), Count: u32p(65536)}},
		GidMap: []*userns.UidGidExtent{{First: u32p(0), LowerFirst: u32p(0), Count: u32p(65536)}},
	}
	for what, taskNS := range map[string]uint32{"tasks in the host's user namespace": 1, "a user namespace mapping host root": 14} {
		t.Run(what, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), patience)
			defer cancel()
			name := fmt.Sprintf("evil-ns%d", taskNS)
			images := t.TempDir()
			testutil.WriteCRIUImage(t, filepath.Join(images, "inventory.img"), "INVENTORY",
				&inventory.InventoryEntry{ImgVersion: u32p(2), RootIds: &criucore.TaskKobjIdsEntry{UserNsId: u32p(1)}})
			testutil.WriteCRIUImage(t, filepath.Join(images, "ids-1.img"), "IDS", &criucore.TaskKobjIdsEntry{UserNsId: u32p(taskNS)})
			testutil.WriteCRIUImage(t, filepath.Join(images, fmt.Sprintf("userns-%d.img", taskNS)), "USERNS", hostRoot)

			hl := hello(name, nil)
			hl.Live, hl.Memory = true, api.MemoryCopy
			hl.Instance.IDMap = &migration.IDMap{UID: block, GID: block, Size: 65536}
			sess := p.accepted(ctx, hl)
			// An honest disk, then the hostile images, then "start".
			if err := sess.Send(migration.Message{Type: migration.MsgDisk, Iteration: 1, Final: true}); err != nil {
				t.Fatal(err)
			}
			st, err := sess.OpenStream(migration.StreamHeader{Kind: migration.StreamDisk})
			if err != nil {
				t.Fatal(err)
			}
			_, _ = st.Write(testutil.NewSendStream(".migrate-0").Mkdir("sbin").File("sbin/init", []byte("#!/bin/sh\n")).Bytes())
			st.Close()
			if _, err := sess.Expect(ctx, migration.MsgDiskSynced); err != nil {
				t.Fatalf("the honest disk was refused: %v", err)
			}
			if err := sess.Send(migration.Message{Type: migration.MsgImages}); err != nil {
				t.Fatal(err)
			}
			ist, err := sess.OpenStream(migration.StreamHeader{Kind: migration.StreamImages})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := migration.SendDir(ist, images); err != nil {
				t.Fatal(err)
			}
			ist.Close()
			if _, err := sess.Expect(ctx, migration.MsgImagesDone); err != nil {
				t.Fatalf("images: %v", err)
			}
			if err := sess.Send(migration.Message{Type: migration.MsgStart}); err != nil {
				t.Fatal(err)
			}
			err = untilEnd(ctx, sess)
			t.Logf("the target answered: %v", err)
			if !errors.Is(err, migration.ErrRemote) || !strings.Contains(err.Error(), "checkpoint images refused") {
				t.Errorf("got %v, want the target's refusal of the images", err)
			}
			checkNothingLeft(t, h, name)
		})
	}
}
