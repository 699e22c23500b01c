//go:build !wasip1

package nritest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// NRI's protobuf JSON read into the world's Go types (package wit) by
// their shape: structs are records, pointers options, slices lists, uint8
// types with a String method enums. The JSON mapping of protobuf: 64-bit
// integers may be strings, an optional wrapper (OptionalInt64, ...) is
// {"value": ...} whose {} means "present, zero", maps are objects (key-value
// lists of the world, sorted by key), enums are names (CONTAINER_RUNNING)
// or numbers. A field the record does not have is an error naming it.

// norm compares field names without case and separators: pod_sandbox_id,
// podSandboxId and PodSandboxID are one name, as are CDI_devices and
// CDIDevices.
func norm(name string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(name))
}

func fromJSON(raw any, v reflect.Value, path string) error {
	if raw == nil {
		return nil // the zero value
	}
	t := v.Type()
	switch t.Kind() {
	case reflect.Pointer:
		elem := reflect.New(t.Elem())
		if t.Elem().Kind() != reflect.Struct {
			// An optional wrapper: {"value": x}, or the value itself.
			if m, ok := raw.(map[string]any); ok {
				for k := range m {
					if k != "value" {
						return fmt.Errorf("%s: expected an optional value {\"value\": ...}, got %s", path, show(raw))
					}
				}
				raw = m["value"]
				path += ".value"
			}
		}
		if err := fromJSON(raw, elem.Elem(), path); err != nil {
			return err
		}
		v.Set(elem)
		return nil
	case reflect.Struct:
		return record(raw, v, path)
	case reflect.Slice:
		return list(raw, v, path)
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf("%s: expected a string, got %s", path, show(raw))
		}
		v.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			return fmt.Errorf("%s: expected true or false, got %s", path, show(raw))
		}
		v.SetBool(b)
		return nil
	case reflect.Uint8:
		if _, isEnum := t.MethodByName("String"); isEnum {
			return enum(raw, v, path)
		}
	}
	switch t.Kind() {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		n, err := integer(raw)
		if err != nil || v.OverflowInt(n) {
			return fmt.Errorf("%s: expected an integer (%s), got %s", path, t, show(raw))
		}
		v.SetInt(n)
		return nil
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		n, err := integer(raw)
		if err != nil || n < 0 || v.OverflowUint(uint64(n)) {
			return fmt.Errorf("%s: expected an integer (%s), got %s", path, t, show(raw))
		}
		v.SetUint(uint64(n))
		return nil
	}
	return fmt.Errorf("%s: the type %s is not read from NRI's JSON", path, t)
}

func show(raw any) string {
	b, _ := json.Marshal(raw)
	return string(b)
}

func integer(raw any) (int64, error) {
	switch x := raw.(type) {
	case json.Number:
		return x.Int64()
	case string:
		return strconv.ParseInt(x, 10, 64)
	case float64:
		if x == float64(int64(x)) {
			return int64(x), nil
		}
	}
	return 0, fmt.Errorf("not an integer")
}

func record(raw any, v reflect.Value, path string) error {
	m, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: expected an object (%s), got %s", path, v.Type().Name(), show(raw))
	}
	t := v.Type()
	byNorm := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		byNorm[norm(t.Field(i).Name)] = i
		names = append(names, t.Field(i).Name)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		i, ok := byNorm[norm(k)]
		if !ok {
			return fmt.Errorf("%s: unknown field %q of %s (known: %s)", path, k, t.Name(), strings.Join(names, ", "))
		}
		if err := fromJSON(m[k], v.Field(i), path+"."+k); err != nil {
			return err
		}
	}
	return nil
}

func list(raw any, v reflect.Value, path string) error {
	t := v.Type()
	item := t.Elem()
	switch x := raw.(type) {
	case []any:
		out := reflect.MakeSlice(t, len(x), len(x))
		for i, e := range x {
			// CDI devices are messages of one field in NRI, strings in the world.
			if m, ok := e.(map[string]any); ok && item.Kind() == reflect.String && len(m) == 1 {
				for _, only := range m {
					e = only
				}
			}
			if err := fromJSON(e, out.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(out)
		return nil
	case map[string]any:
		if item.Kind() != reflect.Struct || item.NumField() != 2 {
			break
		}
		// A map: its entries, sorted by key, as records of (key, value).
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := reflect.MakeSlice(t, len(keys), len(keys))
		valueName := item.Field(1).Name
		for i, k := range keys {
			out.Index(i).Field(0).SetString(k)
			value := x[k]
			if m, ok := value.(map[string]any); ok {
				value = nil
				for mk, mv := range m {
					if norm(mk) == norm(valueName) {
						value = mv
					}
				}
			}
			if err := fromJSON(value, out.Index(i).Field(1), fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
		}
		v.Set(out)
		return nil
	}
	return fmt.Errorf("%s: expected a list, got %s", path, show(raw))
}

// enum sets an enumeration from its NRI name or number. NRI's names carry
// the enum's prefix: CONTAINER_RUNNING is the case `running`.
func enum(raw any, v reflect.Value, path string) error {
	var cases []string
	for i := 0; i < 256; i++ {
		name := reflect.ValueOf(uint8(i)).Convert(v.Type()).MethodByName("String").Call(nil)[0].String()
		if strings.Contains(name, "(") {
			break
		}
		cases = append(cases, name)
	}
	switch x := raw.(type) {
	case string:
		name := strings.ReplaceAll(strings.ToLower(x), "_", "-")
		best := -1
		for i, c := range cases {
			if (name == c || strings.HasSuffix(name, "-"+c)) && (best < 0 || len(c) > len(cases[best])) {
				best = i
			}
		}
		if best >= 0 {
			v.SetUint(uint64(best))
			return nil
		}
	default:
		if n, err := integer(raw); err == nil && n >= 0 && int(n) < len(cases) {
			v.SetUint(uint64(n))
			return nil
		}
	}
	return fmt.Errorf("%s: expected one of %s, got %s", path, strings.Join(cases, ", "), show(raw))
}
