package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"

	bolt "go.etcd.io/bbolt"
)

// Tx is one transaction on the store. Everything changed through a Tx
// given by Update is committed together, or nothing is: an instance's
// record and its migration journal, say, never disagree after a crash.
type Tx struct {
	tx *bolt.Tx
}

// Update runs fn in a read-write transaction, committed (and synced to
// disk) when fn returns nil and rolled back when it returns an error.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
}

// View runs fn in a read-only transaction: a consistent view of the store.
func (s *Store) View(fn func(*Tx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(&Tx{tx: tx}) })
}

// Instance returns the instance called name, or ErrNotFound.
func (t *Tx) Instance(name string) (Instance, error) {
	return txGet[Instance](t.tx, bucketInstances, name)
}

// CreateInstance stores a new instance; ErrExists if the name is taken.
func (t *Tx) CreateInstance(inst Instance) error {
	inst.Version = InstanceVersion
	return put(t.tx, bucketInstances, inst.Name, &inst, true)
}

// PutInstance stores an instance's record, replacing the one of that name.
func (t *Tx) PutInstance(inst Instance) error {
	inst.Version = InstanceVersion
	return put(t.tx, bucketInstances, inst.Name, &inst, false)
}

// DeleteInstance removes an instance's record, or returns ErrNotFound.
func (t *Tx) DeleteInstance(name string) error {
	return txDel(t.tx, bucketInstances, name)
}

// UsedAddresses returns every address held by an instance.
func (t *Tx) UsedAddresses() ([]netip.Addr, error) {
	var out []netip.Addr
	err := t.tx.Bucket(bucketInstances).ForEach(func(k, v []byte) error {
		var inst Instance
		if err := json.Unmarshal(v, &inst); err != nil {
			return fmt.Errorf("decode %s %q: %w", bucketInstances, k, err)
		}
		if inst.Address.IsValid() {
			out = append(out, inst.Address)
		}
		return nil
	})
	return out, err
}

// Migration returns the journal of a migration of instance name in flight
// on this host, and whether there is one.
func (t *Tx) Migration(name string) (Migration, bool, error) {
	m, err := txGet[Migration](t.tx, bucketMigrations, name)
	if err != nil {
		if isNotFound(err) {
			return Migration{}, false, nil
		}
		return Migration{}, false, err
	}
	return m, true, nil
}

// PutMigration records (or replaces) the journal of a migration of
// instance m.Instance.
func (t *Tx) PutMigration(m Migration) error {
	m.Version = MigrationVersion
	return put(t.tx, bucketMigrations, m.Instance, &m, false)
}

// DeleteMigration removes an instance's migration journal; none is fine.
func (t *Tx) DeleteMigration(name string) error {
	return t.tx.Bucket(bucketMigrations).Delete([]byte(name))
}

// DeleteSnapshots removes every snapshot record of an instance.
func (t *Tx) DeleteSnapshots(instance string) error {
	b := t.tx.Bucket(bucketSnapshots)
	prefix := []byte(instance + "/")
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func txGet[T any](tx *bolt.Tx, bucket []byte, key string) (T, error) {
	var out T
	v := tx.Bucket(bucket).Get([]byte(key))
	if v == nil {
		return out, fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
	}
	if err := json.Unmarshal(v, &out); err != nil {
		return out, fmt.Errorf("decode %s %q: %w", bucket, key, err)
	}
	return out, nil
}

func txDel(tx *bolt.Tx, bucket []byte, key string) error {
	b := tx.Bucket(bucket)
	if b.Get([]byte(key)) == nil {
		return fmt.Errorf("%s %q: %w", bucket, key, ErrNotFound)
	}
	return b.Delete([]byte(key))
}
