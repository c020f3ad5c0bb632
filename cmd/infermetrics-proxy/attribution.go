package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/pricing"
)

// This file is -attribute, -attribute-max-values, -attribute-salt and
// -prices: who each request is recorded for, and what it cost, on the usage
// families (instrument.WithAttribution, instrument.WithPriceTable).

// attributeForm is the form of an -attribute value, for its errors.
const attributeForm = "want NAME=header:HEADER, NAME=user or NAME=apikey"

// saltSize is the bytes of the random salt of a proxy without
// -attribute-salt.
const saltSize = 32

// attribute is one -attribute: a dimension and where its value comes from.
type attribute struct {
	name   string
	source string // "header", "user" or "apikey"
	header string // for "header"
}

// attributes is the repeatable -attribute flag; its variable takes a
// comma-separated list.
type attributes []attribute

func (as *attributes) String() string {
	s := make([]string, len(*as))
	for i, a := range *as {
		s[i] = a.name + "=" + a.source
		if a.source == "header" {
			s[i] += ":" + a.header
		}
	}
	return strings.Join(s, ",")
}

// Set parses one NAME=header:HEADER, NAME=user or NAME=apikey; the name's
// checks are NewAttribution's (see config.attribution).
func (as *attributes) Set(v string) error {
	name, source, ok := strings.Cut(strings.TrimSpace(v), "=")
	a := attribute{name: strings.TrimSpace(name), source: strings.TrimSpace(source)}
	if kind, header, isHeader := strings.Cut(a.source, ":"); isHeader && kind == "header" {
		a.source, a.header = kind, strings.TrimSpace(header)
		ok = ok && a.header != ""
	} else {
		ok = ok && (a.source == "user" || a.source == "apikey")
	}
	if !ok || a.name == "" {
		return errors.New(attributeForm)
	}
	*as = append(*as, a)
	return nil
}

// setList parses INFERMETRICS_PROXY_ATTRIBUTE: values separated by commas.
func (as *attributes) setList(v string) error {
	for _, one := range strings.Split(v, ",") {
		if err := as.Set(one); err != nil {
			return err
		}
	}
	return nil
}

// priceFiles is the repeatable -prices flag; its variable takes a
// comma-separated list.
type priceFiles []string

func (ps *priceFiles) String() string { return strings.Join(*ps, ",") }

func (ps *priceFiles) Set(v string) error {
	*ps = append(*ps, strings.TrimSpace(v))
	return nil
}

func (ps *priceFiles) setList(v string) error {
	for _, one := range strings.Split(v, ",") {
		_ = ps.Set(one)
	}
	return nil
}

// usage is what the attribution and price flags make of the recording.
type usage struct {
	attribution   *instrument.Attribution // nil without -attribute
	sources       []openaihttp.AttributionSource
	prices        *pricing.Table // nil without -prices
	saltGenerated bool           // an apikey dimension without -attribute-salt: warned at start
}

// checkUsage builds the Attribution of -attribute and -attribute-max-values
// and loads -prices. Errors name the flag (or its variable) and the value.
func (c *config) checkUsage() []error {
	var errs []error
	if c.attributeMaxValues < 1 || c.attributeMaxValues > instrument.MaxMaxValues {
		errs = append(errs, fmt.Errorf("%s: want 1 to %d", c.setting("attribute-max-values", strconv.Itoa(c.attributeMaxValues)),
			instrument.MaxMaxValues))
	}
	if len(c.attributes) > 0 && len(errs) == 0 {
		dims := make([]instrument.Dimension, len(c.attributes))
		for i, a := range c.attributes {
			dims[i] = instrument.Dimension{Name: a.name, MaxValues: c.attributeMaxValues}
		}
		a, err := instrument.NewAttribution(dims...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.setting("attribute", strconv.Quote(c.attributes.String())), err))
		}
		c.usage.attribution = a
		salt := []byte(c.attributeSalt)
		for _, a := range c.attributes {
			switch a.source {
			case "header":
				s := openaihttp.FromHeader(a.header)
				c.usage.sources = append(c.usage.sources, s)
				if err := s.Err(); err != nil { // the handler would record it as _none
					errs = append(errs, fmt.Errorf("%s: %w; want a header that carries no credential (the API key: %s=apikey)",
						c.setting("attribute", strconv.Quote(a.name+"=header:"+a.header)), err, a.name))
				}
			case "user":
				c.usage.sources = append(c.usage.sources, openaihttp.FromUser())
			case "apikey":
				if len(salt) == 0 {
					salt = make([]byte, saltSize)
					_, _ = rand.Read(salt) // never fails (crypto/rand)
					c.usage.saltGenerated = true
				}
				c.usage.sources = append(c.usage.sources, openaihttp.FromAPIKey(salt))
			}
		}
	}
	if len(c.priceFiles) > 0 {
		t, err := pricing.Load(c.priceFiles...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.setting("prices", strconv.Quote(c.priceFiles.String())), err))
		}
		c.usage.prices = t.ForProvider(c.provider) // the provider's own entries first (mistral/..., azure/...)
	}
	return errs
}

// recorderOptions are the usage options of each model's Recorder.
func (u *usage) recorderOptions() []instrument.Option {
	var opts []instrument.Option
	if u.attribution != nil {
		opts = append(opts, instrument.WithAttribution(u.attribution))
	}
	if u.prices != nil {
		opts = append(opts, instrument.WithPriceTable())
	}
	return opts
}

// handlerOptions are the usage options of openaihttp's handler.
func (u *usage) handlerOptions() []openaihttp.Option {
	var opts []openaihttp.Option
	if u.attribution != nil {
		opts = append(opts, openaihttp.WithAttribution(u.attribution, u.sources...))
	}
	if u.prices != nil {
		opts = append(opts, openaihttp.WithPrices(u.prices))
	}
	return opts
}

// cardinalityLimit is the SDK's limit per stream the usage families need:
// every model's Recorder (-max-models and the overflow model's) at its
// Attribution's most attribute sets, and the overflow series; 0 when the
// SDK's default is enough.
func (c *config) cardinalityLimit() int {
	if c.usage.attribution == nil && c.usage.prices == nil {
		return 0
	}
	n := (c.maxModels+1)*c.usage.attribution.MaxSetsPerRecorder() + 1
	if n <= exporters.DefaultCardinalityLimit {
		return 0
	}
	return n
}
