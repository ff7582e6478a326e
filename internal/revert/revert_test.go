package revert

import (
	"reflect"
	"testing"
)

func TestFailRunsInReverse(t *testing.T) {
	var got []int
	r := New()
	r.Add(func() { got = append(got, 1) })
	r.Add(func() { got = append(got, 2) })
	r.Fail()
	r.Fail() // second call does nothing
	if want := []int{2, 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestSuccessKeepsWork(t *testing.T) {
	ran := false
	r := New()
	r.Add(func() { ran = true })
	r.Success()
	r.Fail()
	if ran {
		t.Fatal("undo ran after Success")
	}
}

func TestClone(t *testing.T) {
	ran := 0
	r := New()
	r.Add(func() { ran++ })
	c := r.Clone()
	r.Success()
	r.Fail()
	c.Fail()
	if ran != 1 {
		t.Fatalf("ran %d times, want 1", ran)
	}
}
