// Package state persists what vesseld knows in an embedded bbolt database.
//
// Vocabulary:
//
//   - Record: one JSON document in a bucket, keyed by name (instances) or
//     fingerprint (images). Every record carries a format Version so later
//     releases can read old databases.
//   - Schema version: the database layout's version, kept in the "meta"
//     bucket and checked on Open.
//
// Only durable facts live here (what was created, with which configuration,
// which address it owns, whether it should be running). Live facts (is the
// process up, how much memory it uses) are read from the kernel.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the database layout this code reads and writes.
// Version 2 added the migrations bucket and Instance.State (version 1 had
// a "running" flag); Open upgrades a version 1 database in place.
const SchemaVersion = 2

var (
	bucketMeta      = []byte("meta")
	bucketInstances = []byte("instances")
	bucketImages    = []byte("images")
	bucketAliases   = []byte("aliases")
	bucketSnapshots = []byte("snapshots")
	bucketCerts     = []byte("certificates")
	bucketTokens    = []byte("tokens")
	bucketPeers     = []byte("peers")
	// bucketMigrations holds the journals of migrations in flight.
	bucketMigrations = []byte("migrations")
	keySchema        = []byte("schema")
)

// Errors.
var (
	// ErrNotFound says no record has that key.
	ErrNotFound = errors.New("not found")
	// ErrExists says a record with that key already exists.
	ErrExists = errors.New("already exists")
	// ErrSchema says the database was written by an incompatible version.
	ErrSchema = errors.New("unsupported database schema")
)

// Store is an open state database. It is safe for concurrent use.
type Store struct {
	db *bolt.DB
}

// Open opens (creating if needed) the database at path.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketInstances, bucketImages, bucketAliases, bucketSnapshots, bucketCerts, bucketTokens, bucketPeers, bucketMigrations} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		v := meta.Get(keySchema)
		if v == nil {
			return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
		}
		n, err := strconv.Atoi(string(v))
		if err != nil || n > SchemaVersion {
			return fmt.Errorf("%w: database has %q, this vesseld reads up to %d", ErrSchema, v, SchemaVersion)
		}
		if n < 2 {
			if err := upgradeV1(tx); err != nil {
				return fmt.Errorf("upgrade database from schema %d: %w", n, err)
			}
		}
		return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise state database %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func get[T any](s *Store, bucket []byte, key string) (T, error) {
	var out T
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
		}
		return json.Unmarshal(v, &out)
	})
	return out, err
}

func list[T any](s *Store, bucket []byte) ([]T, error) {
	var out []T
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode %s %q: %w", bucket, k, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

func put(tx *bolt.Tx, bucket []byte, key string, rec any, mustBeNew bool) error {
	b := tx.Bucket(bucket)
	if mustBeNew && b.Get([]byte(key)) != nil {
		return fmt.Errorf("%s %q: %w", bucket, key, ErrExists)
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), v)
}

// update reads the record at key, lets fn change it, and writes it back in
// one transaction.
func update[T any](s *Store, bucket []byte, key string, fn func(*T) error) (T, error) {
	var rec T
	err := s.db.Update(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
		}
		if err := json.Unmarshal(v, &rec); err != nil {
			return err
		}
		if err := fn(&rec); err != nil {
			return err
		}
		return put(tx, bucket, key, &rec, false)
	})
	return rec, err
}

func del(s *Store, bucket []byte, key string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get([]byte(key)) == nil {
			return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
		}
		return b.Delete([]byte(key))
	})
}

func sortedBy[T any](recs []T, key func(T) string) []T {
	sort.Slice(recs, func(i, j int) bool { return key(recs[i]) < key(recs[j]) })
	return recs
}

// upgradeV1 turns version 1 instance records ("running": bool) into
// version 2 ones (State), in the transaction that opens the database.
func upgradeV1(tx *bolt.Tx) error {
	b := tx.Bucket(bucketInstances)
	type v1 struct {
		Running bool `json:"running"`
	}
	updates := map[string]Instance{}
	err := b.ForEach(func(k, v []byte) error {
		var old v1
		var inst Instance
		if err := json.Unmarshal(v, &old); err != nil {
			return fmt.Errorf("decode %s %q: %w", bucketInstances, k, err)
		}
		if err := json.Unmarshal(v, &inst); err != nil {
			return fmt.Errorf("decode %s %q: %w", bucketInstances, k, err)
		}
		if inst.State == "" {
			inst.State = StateStopped
			if old.Running {
				inst.State = StateRunning
			}
		}
		inst.Version = InstanceVersion
		updates[string(k)] = inst
		return nil
	})
	if err != nil {
		return err
	}
	for k, inst := range updates {
		if err := put(tx, bucketInstances, k, &inst, false); err != nil {
			return err
		}
	}
	return nil
}
