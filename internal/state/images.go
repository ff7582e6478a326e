package state

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ImageVersion is the format version of Image records.
const ImageVersion = 1

// Image is an image's durable record.
type Image struct {
	Version      int       `json:"version"`
	Fingerprint  string    `json:"fingerprint"`
	Aliases      []string  `json:"aliases,omitempty"`
	Size         int64     `json:"size"`
	Created      time.Time `json:"created"`
	Source       string    `json:"source"`
	OS           OS        `json:"os"`
	Init         []string  `json:"init"`
	Env          []string  `json:"env,omitempty"`
	Cwd          string    `json:"cwd,omitempty"`
	StopSignal   string    `json:"stop_signal"`
	Architecture string    `json:"architecture,omitempty"`
}

// PutImage stores an image record, replacing one with the same fingerprint,
// and points each of its aliases at it (taking an alias away from another
// image if needed).
func (s *Store) PutImage(img Image) error {
	img.Version = ImageVersion
	return s.db.Update(func(tx *bolt.Tx) error {
		aliases := tx.Bucket(bucketAliases)
		for _, a := range img.Aliases {
			if old := aliases.Get([]byte(a)); old != nil && string(old) != img.Fingerprint {
				if err := dropAlias(tx, string(old), a); err != nil {
					return err
				}
			}
			if err := aliases.Put([]byte(a), []byte(img.Fingerprint)); err != nil {
				return err
			}
		}
		return put(tx, bucketImages, img.Fingerprint, &img, false)
	})
}

func dropAlias(tx *bolt.Tx, fp, alias string) error {
	b := tx.Bucket(bucketImages)
	var img Image
	v := b.Get([]byte(fp))
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(v, &img); err != nil {
		return err
	}
	kept := img.Aliases[:0]
	for _, a := range img.Aliases {
		if a != alias {
			kept = append(kept, a)
		}
	}
	img.Aliases = kept
	return put(tx, bucketImages, fp, &img, false)
}

// GetImage returns the image with that exact fingerprint.
func (s *Store) GetImage(fingerprint string) (Image, error) {
	return get[Image](s, bucketImages, fingerprint)
}

// ResolveImage finds an image by alias, full fingerprint, or a unique
// fingerprint prefix of at least 6 characters.
func (s *Store) ResolveImage(ref string) (Image, error) {
	var fp string
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketAliases).Get([]byte(ref)); v != nil {
			fp = string(v)
			return nil
		}
		if len(ref) < 6 {
			return nil
		}
		c := tx.Bucket(bucketImages).Cursor()
		for k, _ := c.Seek([]byte(ref)); k != nil && strings.HasPrefix(string(k), ref); k, _ = c.Next() {
			if fp != "" {
				return fmt.Errorf("image %q: ambiguous fingerprint prefix: %w", ref, ErrExists)
			}
			fp = string(k)
		}
		return nil
	})
	if err != nil {
		return Image{}, err
	}
	if fp == "" {
		return Image{}, fmt.Errorf("image %q: %w", ref, ErrNotFound)
	}
	return s.GetImage(fp)
}

// ListImages returns every image, sorted by fingerprint.
func (s *Store) ListImages() ([]Image, error) {
	recs, err := list[Image](s, bucketImages)
	return sortedBy(recs, func(i Image) string { return i.Fingerprint }), err
}

// DeleteImage removes an image record and its aliases.
func (s *Store) DeleteImage(fingerprint string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketImages)
		v := b.Get([]byte(fingerprint))
		if v == nil {
			return fmt.Errorf("image %q: %w", fingerprint, ErrNotFound)
		}
		var img Image
		if err := json.Unmarshal(v, &img); err != nil {
			return err
		}
		for _, a := range img.Aliases {
			if err := tx.Bucket(bucketAliases).Delete([]byte(a)); err != nil {
				return err
			}
		}
		return b.Delete([]byte(fingerprint))
	})
}
