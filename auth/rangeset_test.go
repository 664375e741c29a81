package auth

import "testing"

func TestRangeSetCases(t *testing.T) {
	iv := func(b, e string) interval { return interval{[]byte(b), []byte(e)} }
	cases := []struct {
		perms      []interval
		begin, end string // end "" = +inf
		want       bool
	}{
		{[]interval{iv("a", "c"), iv("x", "z")}, "a", "z", false},
		{[]interval{iv("a", "f"), iv("c", "d"), iv("f", "z")}, "a", "z", true}, // adjacent grants add up
		{[]interval{iv("a", "d"), iv("a", "b"), iv("c", "f")}, "a", "f", true},
		{[]interval{iv("a", "d"), iv("a", "b"), iv("c", "f")}, "a", "", false},
		{[]interval{iv("a", "")}, "a", "", true},
		{[]interval{iv("\x00", "")}, "a", "", true},
		{[]interval{iv("\x00", "")}, "\x00", "", true},
		{[]interval{iv("a", "b")}, "b", "a", false}, // inverted request
		{[]interval{iv("a", "b")}, "a", "a", false}, // empty request
		{nil, "a", "b", false},
	}
	for i, c := range cases {
		if got := newRangeSet(c.perms).covers([]byte(c.begin), []byte(c.end)); got != c.want {
			t.Errorf("#%d: covers=%v want %v", i, got, c.want)
		}
	}
	points := []struct {
		perms []interval
		key   string
		want  bool
	}{
		{[]interval{iv("a", "c"), iv("x", "z")}, "f", false},
		{[]interval{iv("a", "f"), iv("c", "d"), iv("f", "z")}, "b", true},
		{[]interval{iv("a", "d"), iv("a", "b"), iv("c", "f")}, "d", true},
		{[]interval{iv("a", "d"), iv("a", "b"), iv("c", "f")}, "f", false},
		{[]interval{iv("a", "d"), iv("c", "")}, "f", true},
		{[]interval{iv("a", "d"), iv("\x00", "")}, "f", true},
	}
	for i, c := range points {
		b, e := requestInterval([]byte(c.key), nil)
		if got := newRangeSet(c.perms).covers(b, e); got != c.want {
			t.Errorf("point #%d: covers=%v want %v", i, got, c.want)
		}
	}
}

func TestIsValidPermissionRange(t *testing.T) {
	cases := []struct {
		key, end string
		want     bool
	}{
		{"a", "", true},
		{"a", "b", true},
		{"a", "a", false},
		{"b", "a", false},
		{"", "a", false},
		{"", "", false},
		{"", "\x00", false},
		{"\x00", "", true},
		{"a", "\x00", true},
		{"\x00", "\x00", true},
	}
	for _, c := range cases {
		if got := isValidPermissionRange([]byte(c.key), []byte(c.end)); got != c.want {
			t.Errorf("isValidPermissionRange(%q, %q) = %v, want %v", c.key, c.end, got, c.want)
		}
	}
}
