package pricing

import "strings"

// find returns the price of the first name the table has, in the order of
// the package doc, or nil.
func (t *Table) find(model, responseModel string) *Price {
	if t == nil {
		return nil
	}
	names := [2]string{responseModel, model}
	if model == responseModel {
		names[1] = "" // looked up once
	}
	for _, name := range names {
		if p := t.get(name); p != nil {
			return p
		}
	}
	for _, name := range names {
		for s, ok := unprefixed(name); ok; s, ok = unprefixed(s) {
			if p := t.get(s); p != nil {
				return p
			}
		}
	}
	for _, name := range names {
		for s, ok := name, true; ok; s, ok = unprefixed(s) {
			if base, dated := undated(s); dated {
				if p := t.get(base); p != nil {
					return p
				}
			}
		}
	}
	return nil
}

// get returns the price of the model named name exactly, or nil.
func (t *Table) get(name string) *Price {
	if name == "" {
		return nil
	}
	return t.prices[name]
}

// unprefixed returns name without its first provider prefix ("openai/gpt-4o":
// "gpt-4o"), and whether it had one.
func unprefixed(name string) (string, bool) {
	_, rest, ok := strings.Cut(name, "/")
	return rest, ok
}

// undated returns name without its date suffix (-YYYY-MM-DD, -YYYYMMDD,
// @YYYYMMDD), and whether it had one.
func undated(name string) (string, bool) {
	n := len(name)
	if n > 11 && name[n-11] == '-' && name[n-6] == '-' && name[n-3] == '-' &&
		isDate(name[n-10:n-6], name[n-5:n-3], name[n-2:]) {
		return name[:n-11], true
	}
	if n > 9 && (name[n-9] == '-' || name[n-9] == '@') && isDate(name[n-8:n-4], name[n-4:n-2], name[n-2:]) {
		return name[:n-9], true
	}
	return "", false
}

// isDate reports whether year, month and day are the digits of a day of a
// year 20xx.
func isDate(year, month, day string) bool {
	num := func(s string) int {
		v := 0
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return -1
			}
			v = v*10 + int(s[i]-'0')
		}
		return v
	}
	y, m, d := num(year), num(month), num(day)
	return y >= 2000 && y <= 2099 && m >= 1 && m <= 12 && d >= 1 && d <= 31
}
