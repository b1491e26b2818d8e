/* The flow form lists the options of every source, format and sink type, each type's in a
 * fieldset of its own; this shows only those of the chosen types. Without it every fieldset
 * is shown, and each says for which type it counts: the server reads only the chosen ones. */
(function () {
  "use strict";

  var SECTIONS = ["source", "format", "sink"];

  function chosenType(section) {
    var select = document.getElementById("id_" + section + "_type");
    if (select) {
      return select.value;
    }
    // A page the user may only view shows the type as text.
    var shown = document.querySelector(".field-" + section + "_type .readonly");
    return shown ? shown.textContent.trim() : null;
  }

  function showChosen(section) {
    var type = chosenType(section);
    if (type === null) {
      return;
    }
    var fieldsets = document.querySelectorAll("fieldset.adf-" + section + "-options");
    Array.prototype.forEach.call(fieldsets, function (fieldset) {
      fieldset.hidden = !fieldset.classList.contains("adf-type-" + type);
    });
  }

  /* "Test connection" beside the [source] and [sink] type choices: posts the form as it
   * stands (unsaved values included) to the section's test and shows the answer, an HTML
   * fragment the server rendered, below the button. */
  function addTestButtons() {
    var urls = document.getElementById("adf-section-check");
    if (!urls) {
      return;
    }
    ["source", "sink"].forEach(function (section) {
      var fieldset = document.querySelector("fieldset.adf-" + section + "-choice");
      if (!fieldset) {
        return;
      }
      var row = document.createElement("div");
      row.className = "form-row adf-test-connection";
      var button = document.createElement("button");
      button.type = "button";
      button.className = "button";
      button.id = "test-connection-" + section;
      button.textContent = "Test connection";
      var result = document.createElement("div");
      result.id = "test-connection-" + section + "-result";
      result.setAttribute("aria-live", "polite");
      row.appendChild(button);
      row.appendChild(result);
      fieldset.appendChild(row);
      button.addEventListener("click", function () {
        var form = fieldset.closest("form");
        button.disabled = true;
        result.textContent = "Testing…";
        fetch(urls.dataset[section], {
          method: "POST",
          body: new FormData(form),
          credentials: "same-origin",
        })
          .then(function (response) {
            return response.text();
          })
          .then(function (html) {
            result.innerHTML = html;
          })
          .catch(function (error) {
            result.textContent = "Test connection could not be asked: " + error;
          })
          .then(function () {
            button.disabled = false;
          });
      });
    });
  }

  function init() {
    addTestButtons();
    SECTIONS.forEach(function (section) {
      var select = document.getElementById("id_" + section + "_type");
      if (select) {
        select.addEventListener("change", function () {
          showChosen(section);
        });
      }
      showChosen(section);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
